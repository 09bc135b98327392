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

/*
 * The same release's host network (--network=host, as Garrison runs it)
 * answers read(2), readv(2), write(2) and writev(2) on a *blocking* socket
 * with EAGAIN when there is nothing to read or no room to write, instead of
 * waiting as recv(2) and send(2) do: `head -c 1G /dev/zero | cat >
 * /dev/tcp/host/port` fails part way ("Resource temporarily unavailable").
 * A program that set O_NONBLOCK expects EAGAIN and gets it; for one that
 * did not, these wrappers wait until the socket is ready and call again:
 * the blocking call the program asked for. (glibc's stdio calls its own
 * internal write, which no preloaded library reaches: `head` writing to a
 * socket itself still fails; through `cat` it works.) A socket's own
 * SO_RCVTIMEO or SO_SNDTIMEO does not end the wait: such a call waits
 * until the socket is ready (bounding the poll by the timeout getsockopt(2)
 * reports was tried, and under this runsc it did not end the wait).
 */
#include <errno.h>
#include <poll.h>
#include <sys/uio.h>

/* Whether EAGAIN from fd is gVisor's and not the program's own: fd is a
 * socket without O_NONBLOCK. Leaves errno as it found it. */
static int blocking_socket(int fd)
{
    int saved = errno;
    struct stat st;
    int flags = fcntl(fd, F_GETFL);
    int answer = flags >= 0 && !(flags & O_NONBLOCK) && fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode);
    errno = saved;
    return answer;
}

/* Whether to call again after n: it failed with gVisor's EAGAIN and fd has
 * since become ready for `events`. A wait cut by a signal ends with EINTR,
 * as a blocking call interrupted before any transfer does. */
static int again(ssize_t n, int fd, short events)
{
    if (n >= 0 || errno != EAGAIN || !blocking_socket(fd))
        return 0;
    struct pollfd p = {.fd = fd, .events = events};
    return poll(&p, 1, -1) >= 0;
}

ssize_t read(int fd, void *buf, size_t count)
{
    ssize_t n;
    do
        n = syscall(SYS_read, fd, buf, count);
    while (again(n, fd, POLLIN));
    return n;
}

ssize_t readv(int fd, const struct iovec *iov, int iovcnt)
{
    ssize_t n;
    do
        n = syscall(SYS_readv, fd, iov, iovcnt);
    while (again(n, fd, POLLIN));
    return n;
}

ssize_t write(int fd, const void *buf, size_t count)
{
    ssize_t n;
    do
        n = syscall(SYS_write, fd, buf, count);
    while (again(n, fd, POLLOUT));
    return n;
}

ssize_t writev(int fd, const struct iovec *iov, int iovcnt)
{
    ssize_t n;
    do
        n = syscall(SYS_writev, fd, iov, iovcnt);
    while (again(n, fd, POLLOUT));
    return n;
}
