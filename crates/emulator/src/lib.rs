//! Emulator (to be written).
