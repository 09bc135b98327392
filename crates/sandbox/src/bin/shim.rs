//! The shim as a binary of its own: for the host backend's tests, and
//! (linked statically) as the process supervisor inside `local` containers.
//! `garrison` carries the same shim behind the same hidden arguments.

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match sandbox::shim::dispatch(&args) {
        Some(code) => std::process::exit(code),
        None => {
            eprintln!("garrison-shim is started by Garrison's sandbox backends, not by hand");
            std::process::exit(2);
        }
    }
}
