//! Opening a connection: socket, optional TLS negotiation, startup packet, login, and the
//! session's initial parameters (protocol chapter, "Start-up" and "SSL Session
//! Encryption").
//!
//! TLS starts with an SSLRequest (an 8-byte packet with code 80877103); the server answers
//! one unframed byte, `S` (go ahead with the handshake) or `N` (no TLS). Exactly one byte
//! is read there, so nothing an attacker injects before the handshake can end up in the
//! protocol stream (CVE-2021-23222). `sslmode` decides what happens on `N` and on failures,
//! as in libpq: prefer falls back to plain, allow tries plain first, require and the
//! verify modes insist on TLS. Unix sockets never use TLS (libpq ignores sslmode there).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::Duration;

use postgres_protocol::message::frontend;
use rustls::{ClientConfig, ClientConnection, StreamOwned};

use super::auth::{self, Login};
use super::backend;
use super::config::{Settings, Target, TargetAddr};
use super::connection::Connection;
use super::dsn::SslMode;
use super::error::PgError;
use super::io::{io_error, Stream, Wire};
use super::tls;

/// How one attempt treats TLS.
#[derive(Clone, Copy, PartialEq, Eq)]
enum TlsUse {
    Plain,
    /// TLS if the server agrees, plain after an `N`.
    IfOffered,
    Required,
}

/// Tries each target in turn (libpq's multi-host behaviour): a server that cannot be
/// reached or fails the TLS setup moves on to the next; a refused login or a configuration
/// error stops, as the remaining hosts would refuse the same credentials.
pub(crate) fn connect(settings: &Settings, replication: bool) -> Result<Connection, PgError> {
    let mut last = None;
    for target in &settings.targets {
        match connect_target(settings, target, replication) {
            Ok(conn) => return Ok(conn),
            Err(e @ (PgError::Auth { .. } | PgError::Config(_))) => return Err(e),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| PgError::config("no host to connect to")))
}

fn connect_target(
    settings: &Settings,
    target: &Target,
    replication: bool,
) -> Result<Connection, PgError> {
    if matches!(target.addr, TargetAddr::Unix(_)) {
        return attempt(settings, target, replication, TlsUse::Plain, None);
    }
    let config = || tls::client_config(settings);
    match settings.sslmode {
        SslMode::Disable => attempt(settings, target, replication, TlsUse::Plain, None),
        SslMode::Allow => match attempt(settings, target, replication, TlsUse::Plain, None) {
            Err(e) if is_login_refusal(&e) => attempt(
                settings,
                target,
                replication,
                TlsUse::Required,
                Some(config()?),
            ),
            other => other,
        },
        SslMode::Prefer => {
            let result = attempt(
                settings,
                target,
                replication,
                TlsUse::IfOffered,
                Some(config()?),
            );
            match result {
                // libpq retries without TLS when the TLS attempt fails (a handshake the
                // server cannot do, a server whose pg_hba.conf refuses TLS logins).
                Err(e) if matches!(e, PgError::Tls(_)) || is_login_refusal(&e) => {
                    attempt(settings, target, replication, TlsUse::Plain, None).map_err(|plain| {
                        if matches!(plain, PgError::Auth { .. }) {
                            plain
                        } else {
                            e
                        }
                    })
                }
                other => other,
            }
        }
        SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => attempt(
            settings,
            target,
            replication,
            TlsUse::Required,
            Some(config()?),
        ),
    }
}

fn is_login_refusal(e: &PgError) -> bool {
    matches!(e, PgError::Auth { .. })
}

fn attempt(
    settings: &Settings,
    target: &Target,
    replication: bool,
    tls_use: TlsUse,
    tls_config: Option<Arc<ClientConfig>>,
) -> Result<Connection, PgError> {
    let timeout = settings.connect_timeout;
    let mut stream = open_socket(target, timeout)?;
    if let (Some(config), Stream::Tcp(_)) = (tls_config, &stream) {
        if tls_use != TlsUse::Plain {
            stream = negotiate_tls(stream, config, target, tls_use, timeout)?;
        }
    }
    let mut wire = Wire::new(stream);
    wire.set_timeouts(timeout)?;

    let mut startup: Vec<(&str, &str)> = vec![
        ("user", settings.user.as_str()),
        ("database", settings.dbname.as_str()),
        // Text values are returned as Rust strings; the decoder expects UTF-8 too.
        ("client_encoding", "UTF8"),
    ];
    if let Some(name) = &settings.application_name {
        startup.push(("application_name", name));
    }
    if let Some(options) = &settings.options {
        startup.push(("options", options));
    }
    if replication {
        // A logical walsender: replication commands and SQL, bound to `database`.
        startup.push(("replication", "database"));
    }
    for (name, value) in &settings.startup_parameters {
        startup.retain(|(n, _)| n != name);
        startup.push((name, value));
    }
    frontend::startup_message(startup.iter().copied(), &mut wire.out)
        .map_err(|e| PgError::config(format!("invalid startup parameter: {e}")))?;
    wire.flush()?;

    let login = Login {
        user: &settings.user,
        password: target.password.as_deref(),
        channel_binding: settings.channel_binding,
    };
    auth::authenticate(&mut wire, &login)?;
    let mut conn = Connection::after_login(wire)?;
    conn.set_timeouts(None)?;
    Ok(conn)
}

/// A connected TCP (TCP_NODELAY: status updates and queries are small and must not wait
/// for Nagle) or Unix socket, within `timeout` per address.
fn open_socket(target: &Target, timeout: Option<Duration>) -> Result<Stream, PgError> {
    let addrs: Vec<SocketAddr> = match &target.addr {
        TargetAddr::Unix(path) => {
            return UnixStream::connect(path).map(Stream::Unix).map_err(|e| {
                PgError::io(&format!("connection to {} failed", target.describe()), e)
            });
        }
        TargetAddr::Ip(ip) => vec![SocketAddr::new(*ip, target.port)],
        TargetAddr::Name(name) => (name.as_str(), target.port)
            .to_socket_addrs()
            .map_err(|e| PgError::io(&format!("could not resolve host name \"{name}\""), e))?
            .collect(),
    };
    let mut last = None;
    for addr in addrs {
        let result = match timeout {
            Some(t) => TcpStream::connect_timeout(&addr, t),
            None => TcpStream::connect(addr),
        };
        match result {
            Ok(sock) => {
                sock.set_nodelay(true)
                    .map_err(|e| PgError::io("could not set TCP_NODELAY", e))?;
                return Ok(Stream::Tcp(sock));
            }
            Err(e) => {
                last = Some(PgError::io(
                    &format!("connection to {} ({addr}) failed", target.describe()),
                    e,
                ))
            }
        }
    }
    Err(last.unwrap_or_else(|| {
        PgError::connect(format!("host name \"{}\" has no address", target.host))
    }))
}

/// SSLRequest, the one-byte answer, then the TLS handshake.
fn negotiate_tls(
    stream: Stream,
    config: Arc<ClientConfig>,
    target: &Target,
    tls_use: TlsUse,
    timeout: Option<Duration>,
) -> Result<Stream, PgError> {
    let Stream::Tcp(mut sock) = stream else {
        return Ok(stream);
    };
    let io = |e| {
        io_error(
            &format!("TLS negotiation with {} failed", target.describe()),
            e,
        )
    };
    sock.set_read_timeout(timeout).map_err(io)?;
    sock.set_write_timeout(timeout).map_err(io)?;
    let mut request = bytes::BytesMut::with_capacity(8);
    frontend::ssl_request(&mut request);
    sock.write_all(&request).map_err(io)?;
    let mut answer = [0u8; 1];
    sock.read_exact(&mut answer).map_err(io)?;
    match answer {
        [b'S'] => {}
        [b'N'] if tls_use == TlsUse::IfOffered => return Ok(Stream::Tcp(sock)),
        [b'N'] => {
            return Err(PgError::Tls(format!(
                "{} does not support TLS, but sslmode requires it",
                target.describe()
            )))
        }
        // Servers before 7.x answered with an ErrorResponse; nothing current does.
        [b'E'] => {
            return Err(PgError::Tls(format!(
                "{} refused the TLS request with an error",
                target.describe()
            )))
        }
        [other] => {
            return Err(PgError::protocol(format!(
                "unexpected answer {:?} to the TLS request",
                char::from(other)
            )))
        }
    }
    let peer = sock.peer_addr().ok().map(|a| a.ip());
    let name = tls::server_name(&target.host, peer)?;
    let conn = ClientConnection::new(config, name)
        .map_err(|e| PgError::Tls(format!("cannot start TLS: {e}")))?;
    let mut tls = StreamOwned::new(conn, sock);
    while tls.conn.is_handshaking() {
        tls.conn.complete_io(&mut tls.sock).map_err(|e| {
            if e.kind() == std::io::ErrorKind::InvalidData {
                PgError::Tls(format!(
                    "TLS handshake with {} failed: {e}",
                    target.describe()
                ))
            } else {
                io_error(
                    &format!("TLS handshake with {} failed", target.describe()),
                    e,
                )
            }
        })?;
    }
    Ok(Stream::Tls(Box::new(tls)))
}

/// Reads the rest of the start-up: ParameterStatus, BackendKeyData, then ReadyForQuery.
pub(crate) fn read_startup(
    wire: &mut Wire,
    mut on_parameter: impl FnMut(String, String),
) -> Result<(u32, Vec<u8>), PgError> {
    let mut key = (0, Vec::new());
    loop {
        let frame = wire.frame()?;
        let body = wire.body(&frame)?;
        match frame.tag {
            backend::PARAMETER_STATUS => {
                let (name, value) = backend::parameter_status(body)?;
                on_parameter(name, value);
            }
            backend::BACKEND_KEY_DATA => key = backend::backend_key_data(body)?,
            backend::NOTICE_RESPONSE => {}
            backend::READY_FOR_QUERY => return Ok(key),
            backend::ERROR_RESPONSE => {
                return Err(PgError::from_server(backend::error_fields(body)?, true));
            }
            tag => {
                return Err(PgError::protocol(format!(
                    "unexpected {} during start-up",
                    backend::tag_name(tag)
                )))
            }
        }
    }
}
