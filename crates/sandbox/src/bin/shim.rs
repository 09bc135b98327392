//! Standalone shim for tests of the host backend; `garrison` carries the
//! same shim behind a hidden argument.

fn main() {
    let is_shim = std::env::args().nth(1).as_deref() == Some(sandbox::shim::SHIM_ARG);
    if !is_shim {
        eprintln!("garrison-shim is started by the host backend, not by hand");
        std::process::exit(2);
    }
    std::process::exit(sandbox::shim::run());
}
