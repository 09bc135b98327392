//! `garrison emulate`: the emulator of Devin's control plane as a process.
//! Its flags and its loop belong to the `emulator` crate, which tests and
//! `garrison demo` also start in-process.

pub(crate) use emulator::cli::{EmulateArgs, run};
