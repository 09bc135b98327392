//! The shim as a binary of this package, for its integration tests only:
//! cargo hands a package's tests the paths of that package's binaries
//! alone. Production uses `garrison` itself, or `garrison-shim`.

fn main() {
    shim::main()
}
