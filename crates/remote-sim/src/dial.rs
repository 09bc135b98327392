//! Dialing the gateway: address resolution, the authenticated websocket
//! handshake, and retry with backoff while the gateway is unreachable.
//!
//! Plain `ws://` over TCP only: the simulator only ever dials the project's
//! emulator, never Devin's real gateway.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::time::{Instant, sleep, timeout};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::handshake::client::Request;
use tokio_tungstenite::tungstenite::http::{HeaderValue, StatusCode};
use tokio_tungstenite::{WebSocketStream, client_async};

use crate::config::Config;

pub(crate) type Socket = WebSocketStream<TcpStream>;

pub(crate) enum DialError {
    /// The gateway answered the handshake with a refusal; retrying with the
    /// same token cannot help.
    Refused(StatusCode),
    /// No connection within the budget; carries the last error seen.
    Unreachable(String),
}

/// One attempt either connects, is refused for good, or failed in a way
/// worth retrying (connection refused, reset, gateway briefly overloaded).
enum Attempt {
    Refused(StatusCode),
    Transient(String),
}

const FIRST_DELAY: Duration = Duration::from_millis(100);
const MAX_DELAY: Duration = Duration::from_secs(2);
/// Even with the budget spent, one attempt gets this long: a zero budget
/// means "try once", not "give up before trying".
const MIN_ATTEMPT: Duration = Duration::from_secs(2);

pub(crate) async fn dial(config: &Config) -> Result<Socket, DialError> {
    let deadline = Instant::now() + config.connect_budget;
    let mut delay = FIRST_DELAY;
    loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        let last = match timeout(remaining.max(MIN_ATTEMPT), attempt(config)).await {
            Ok(Ok(socket)) => return Ok(socket),
            Ok(Err(Attempt::Refused(status))) => return Err(DialError::Refused(status)),
            Ok(Err(Attempt::Transient(why))) => why,
            Err(_) => "timed out".to_string(),
        };
        if Instant::now() + delay >= deadline {
            return Err(DialError::Unreachable(last));
        }
        sleep(delay).await;
        delay = (delay * 2).min(MAX_DELAY);
    }
}

async fn attempt(config: &Config) -> Result<Socket, Attempt> {
    let gateway = &config.gateway;
    let addrs = resolve(&gateway.host, gateway.port)
        .await
        .map_err(|err| Attempt::Transient(format!("cannot resolve {}: {err}", gateway.host)))?;
    let stream = connect_any(&addrs)
        .await
        .map_err(|err| Attempt::Transient(format!("cannot connect: {err}")))?;
    // Steps are small request/response messages; don't let Nagle hold them.
    let _ = stream.set_nodelay(true);
    let request = request(config).map_err(Attempt::Transient)?;
    match client_async(request, stream).await {
        Ok((socket, _response)) => Ok(socket),
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            let status = response.status();
            if status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS {
                Err(Attempt::Transient(format!("gateway answered {status}")))
            } else {
                Err(Attempt::Refused(status))
            }
        }
        Err(err) => Err(Attempt::Transient(format!("handshake failed: {err}"))),
    }
}

/// Builds the upgrade request with the spawn contract's credentials.
fn request(config: &Config) -> Result<Request, String> {
    let mut request = (&config.gateway.uri)
        .into_client_request()
        .map_err(|err| format!("bad gateway URL: {err}"))?;
    // Config already checked both values are valid header values; the
    // errors here never include them.
    let mut authorization =
        HeaderValue::from_str(&format!("Bearer {}", config.connect_token.expose()))
            .map_err(|_| "connect token is not a valid header value".to_string())?;
    authorization.set_sensitive(true);
    let session = HeaderValue::from_str(&config.session_id)
        .map_err(|_| "session id is not a valid header value".to_string())?;
    let headers = request.headers_mut();
    headers.insert(gateway_proto::AUTHORIZATION, authorization);
    headers.insert(gateway_proto::SESSION_HEADER, session);
    Ok(request)
}

/// Resolves literal addresses and `localhost` without the system resolver.
///
/// The binary is linked statically against glibc, whose `getaddrinfo` then
/// needs NSS modules of the exact same glibc version at run time, which a
/// sandbox rootfs rarely has. The gateway is an IP address or `localhost`
/// in every setup we run, so those never reach the resolver.
async fn resolve(host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    let lower = host.to_ascii_lowercase();
    if lower == "localhost" || lower.ends_with(".localhost") {
        return Ok(vec![
            SocketAddr::new(Ipv4Addr::LOCALHOST.into(), port),
            SocketAddr::new(Ipv6Addr::LOCALHOST.into(), port),
        ]);
    }
    Ok(tokio::net::lookup_host((host, port)).await?.collect())
}

async fn connect_any(addrs: &[SocketAddr]) -> io::Result<TcpStream> {
    let mut last = io::Error::new(io::ErrorKind::NotFound, "no addresses");
    for addr in addrs {
        match TcpStream::connect(addr).await {
            Ok(stream) => return Ok(stream),
            Err(err) => last = err,
        }
    }
    Err(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn literals_and_localhost_skip_the_resolver() {
        assert_eq!(
            resolve("127.0.0.1", 80).await.unwrap(),
            vec!["127.0.0.1:80".parse().unwrap()]
        );
        assert_eq!(
            resolve("::1", 81).await.unwrap(),
            vec!["[::1]:81".parse().unwrap()]
        );
        let local = resolve("LocalHost", 82).await.unwrap();
        assert_eq!(local[0], "127.0.0.1:82".parse().unwrap());
    }
}
