//! Blocking sockets in a sandbox block: a writer whose reader is slow
//! waits for it, and a reader waits for data, under runsc as under runc
//! (gVisor's host network answers `read`/`write` on a full or empty
//! blocking socket with EAGAIN; the preloaded `runsc-compat.so` waits
//! instead, see `native/runsc_compat.c`).

use crate::support::*;
use sandbox::{ProcessStatus, Sandbox};

under_both_runtimes!(a_blocking_socket_writer_waits_for_a_slow_reader);

/// A listener on the sandbox's loopback that starts reading only after the
/// writer has filled the socket's buffers (several MB: 20 MB are sent),
/// with `sysread` (read(2)), so it also empties the socket before the
/// writer refills it; `cat` writes with write(2). bash for `/dev/tcp`.
const SCRIPT: &str = r#"exec bash -s <<'EOS'
perl -MIO::Socket::INET -e '$| = 1;
  $s = IO::Socket::INET->new(Listen => 1, LocalAddr => "127.0.0.1:7070", ReuseAddr => 1)
    or die "listen: $!";
  print "listening\n"; $c = $s->accept; sleep 2; $n = 0;
  while (($r = sysread($c, $b, 65536)) > 0) { $n += $r }
  print "got $n\n"' > /tmp/sink.out 2>&1 &
n=0; while ! grep -q listening /tmp/sink.out && [ $n -lt 600 ]; do n=$((n+1)); sleep 0.05; done
head -c 20000000 /dev/zero | cat > /dev/tcp/127.0.0.1/7070; echo "sent rc=$?"
wait; cat /tmp/sink.out
EOS
"#;

async fn a_blocking_socket_writer_waits_for_a_slow_reader(runtime: Runtime) {
    let Some(s) = sandbox_on(runtime, sized(1.0, 512, 256)).await else {
        return;
    };
    let (status, out) = sh(&s, SCRIPT).await;
    assert_eq!(status, ProcessStatus::Exited(0), "{out}");
    assert!(out.contains("sent rc=0"), "{out}");
    assert!(out.contains("got 20000000"), "{out}");
    s.backend.destroy(&s.handle).await.unwrap();
}
