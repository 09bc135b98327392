/*
 * Preloaded into every dynamically linked program of a runsc sandbox
 * (through /etc/ld.so.preload; see crates/local/src/compat.rs).
 *
 * gVisor's 2022-12 release (Debian 12's runsc) refuses statx(2) and
 * newfstatat(2) with EINVAL when the flags include AT_NO_AUTOMOUNT, and
 * Debian 12's coreutils always pass it: `ls DIR` and `stat FILE` fail.
 * gVisor has no automount points, so the flag means nothing there: these
 * wrappers drop it and make the same system call.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

int statx(int dirfd, const char *path, int flags, unsigned int mask, struct statx *buf)
{
    return (int)syscall(SYS_statx, dirfd, path, flags & ~AT_NO_AUTOMOUNT, mask, buf);
}

int fstatat(int dirfd, const char *path, struct stat *buf, int flags)
{
    return (int)syscall(SYS_newfstatat, dirfd, path, buf, flags & ~AT_NO_AUTOMOUNT);
}

int fstatat64(int dirfd, const char *path, struct stat64 *buf, int flags)
{
    return (int)syscall(SYS_newfstatat, dirfd, path, buf, flags & ~AT_NO_AUTOMOUNT);
}
