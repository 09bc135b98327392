//! One line of `garrison doctor`: the type is the plug-in interface's, so
//! a backend's prerequisites and Garrison's own checks read alike.

pub(crate) use sandbox::plugin::doctor::{Check, Kind, Outcome};
