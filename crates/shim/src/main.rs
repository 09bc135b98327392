//! The shim as a binary of its own: for the backends' tests, and (linked
//! statically) as the process supervisor inside `local` containers.
//! `garrison` carries the same shim behind the same hidden arguments.

fn main() {
    shim::main()
}
