# Shared by scripts/setup, scripts/test and scripts/demo; sourced, not run.
# Sourcing it moves to the repository root and makes `cargo` findable.

cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Messages go to stderr so they never mix with a command's own output
# (e.g. `scripts/demo ... | jq`).
say() { echo "${0##*/}: $*" >&2; }
die() { say "error: $*"; exit 1; }

# rustup installs into ~/.cargo/bin, which non-login shells (CI, sudo)
# often lack on PATH.
if ! command -v cargo >/dev/null 2>&1 && [ -x "${HOME:-/root}/.cargo/bin/cargo" ]; then
    export PATH="${HOME:-/root}/.cargo/bin:$PATH"
fi

# Where cargo puts build output; honours CARGO_TARGET_DIR like cargo does.
target_dir() { echo "${CARGO_TARGET_DIR:-$PWD/target}"; }

# `--locked` whenever a lock file exists: builds use exactly the versions
# that were reviewed, and a stale Cargo.lock fails loudly.
locked_flag() { if [ -f Cargo.lock ]; then echo --locked; fi; }
