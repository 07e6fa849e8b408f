//! Opening a connection: socket, optional TLS negotiation, startup packet, login, and the
//! session's initial parameters (protocol chapter, "Start-up" and "SSL Session
//! Encryption").
//!
//! [`connect`] is the only way to open a connection: it applies the environment, the
//! password file and the defaults to the connection string (`config::resolve`), tries
//! each host, and returns the pieces of a logged-in session ([`Established`]) for
//! `Connection` to hold. [`after_login`] is its last step on its own, for a socket the
//! fuzz targets have already taken through the login. This module knows nothing of
//! `Connection`; the dependency runs one way, from `connection.rs` to here.
//!
//! Start-up, once the login succeeded: the server reports its run-time parameters
//! (ParameterStatus: `server_version`, `client_encoding`, `TimeZone`, ...), the backend's
//! process id and cancel key (BackendKeyData), then ReadyForQuery.
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
use super::config::{self, Environment, Settings, Target, TargetAddr};
use super::dsn::{ConnParams, SslMode, TargetSessionAttrs};
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

/// A logged-in session as the start-up leaves it: the wire just after the first
/// ReadyForQuery (no time-outs set), and what the server reported on the way.
pub(crate) struct Established {
    pub(crate) wire: Wire,
    pub(crate) parameters: Parameters,
    /// `server_version` as a number (see [`parse_server_version`]).
    pub(crate) server_version_num: u32,
    pub(crate) backend_pid: u32,
}

/// The run-time parameters the server reported (ParameterStatus), first at start-up and
/// later whenever a command changes one (`SET TimeZone ...`).
#[derive(Debug, Default)]
pub(crate) struct Parameters(Vec<(String, String)>);

impl Parameters {
    /// Records a reported value, replacing an earlier one of the same name.
    pub(crate) fn set(&mut self, name: String, value: String) {
        match self.0.iter_mut().find(|(n, _)| *n == name) {
            Some(entry) => entry.1 = value,
            None => self.0.push((name, value)),
        }
    }

    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Opens a connection with `params` (environment variables, the password file and
/// defaults applied as libpq does). `replication` asks for a logical walsender.
pub(crate) fn connect(params: &ConnParams, replication: bool) -> Result<Established, PgError> {
    let env = Environment::from_process();
    let settings = config::resolve(params, &env)?;
    connect_resolved(&settings, replication)
}

/// Tries each target in turn (libpq's multi-host behaviour): a server that cannot be
/// reached, fails the TLS setup or is not of the kind `target_session_attrs` asks for
/// moves on to the next; a refused login or a configuration error stops, as the remaining
/// hosts would refuse the same credentials. `prefer-standby` makes two passes: standbys
/// first, then any server.
fn connect_resolved(settings: &Settings, replication: bool) -> Result<Established, PgError> {
    let passes = match settings.target_session_attrs {
        TargetSessionAttrs::PreferStandby => {
            vec![TargetSessionAttrs::Standby, TargetSessionAttrs::Any]
        }
        wanted => vec![wanted],
    };
    let mut last = None;
    let mut passed_over = Vec::new();
    for wanted in passes {
        for target in &settings.targets {
            match connect_target(settings, target, replication) {
                Ok(mut conn) => match session_mismatch(&mut conn.wire, &conn.parameters, wanted) {
                    Ok(None) => return Ok(conn),
                    Ok(Some(why)) => {
                        let mut wire = conn.wire;
                        // A polite goodbye; the socket closes either way.
                        frontend::terminate(&mut wire.out);
                        let _ = wire.flush();
                        passed_over.push(format!("{} {why}", target.describe()));
                    }
                    Err(e) => last = Some(e),
                },
                Err(e @ (PgError::Auth { .. } | PgError::Config(_))) => return Err(e),
                Err(e) => last = Some(e),
            }
        }
    }
    if !passed_over.is_empty() && last.is_none() {
        return Err(PgError::connect(format!(
            "no server fits target_session_attrs={}: {}",
            attrs_name(settings.target_session_attrs),
            passed_over.join("; ")
        )));
    }
    Err(last.unwrap_or_else(|| PgError::config("no host to connect to")))
}

fn attrs_name(attrs: TargetSessionAttrs) -> &'static str {
    match attrs {
        TargetSessionAttrs::Any => "any",
        TargetSessionAttrs::ReadWrite => "read-write",
        TargetSessionAttrs::ReadOnly => "read-only",
        TargetSessionAttrs::Primary => "primary",
        TargetSessionAttrs::Standby => "standby",
        TargetSessionAttrs::PreferStandby => "prefer-standby",
    }
}

/// Why a logged-in session is not of the kind `wanted` (None: it is). PostgreSQL 14+
/// reports `in_hot_standby` and `default_transaction_read_only` at start-up (libpq reads
/// them the same way); older servers are asked.
fn session_mismatch(
    wire: &mut Wire,
    parameters: &Parameters,
    wanted: TargetSessionAttrs,
) -> Result<Option<&'static str>, PgError> {
    let reported = |name: &str| parameters.get(name).map(|v| v == "on");
    let in_recovery = |wire: &mut Wire| -> Result<bool, PgError> {
        match reported("in_hot_standby") {
            Some(standby) => Ok(standby),
            None => Ok(one_value(wire, "SELECT pg_catalog.pg_is_in_recovery()")? == "t"),
        }
    };
    Ok(match wanted {
        TargetSessionAttrs::Any | TargetSessionAttrs::PreferStandby => None,
        TargetSessionAttrs::ReadWrite | TargetSessionAttrs::ReadOnly => {
            let read_only = match (
                reported("in_hot_standby"),
                reported("default_transaction_read_only"),
            ) {
                (Some(standby), Some(default_read_only)) => standby || default_read_only,
                _ => one_value(wire, "SHOW transaction_read_only")? == "on",
            };
            match (wanted, read_only) {
                (TargetSessionAttrs::ReadWrite, true) => Some("is read-only"),
                (TargetSessionAttrs::ReadOnly, false) => Some("is not read-only"),
                _ => None,
            }
        }
        TargetSessionAttrs::Primary => in_recovery(wire)?.then_some("is in hot standby mode"),
        TargetSessionAttrs::Standby => {
            (!in_recovery(wire)?).then_some("is not in hot standby mode")
        }
    })
}

/// The first value of the first row of a simple query run during the connection set-up.
fn one_value(wire: &mut Wire, sql: &str) -> Result<String, PgError> {
    frontend::query(sql, &mut wire.out).map_err(|e| PgError::protocol(e.to_string()))?;
    wire.flush()?;
    let mut value = None;
    let mut error = None;
    loop {
        let frame = wire.frame()?;
        let body = wire.body(&frame)?;
        match frame.tag {
            backend::DATA_ROW if value.is_none() => {
                value = backend::data_row(body)?.into_iter().next().flatten();
            }
            backend::ERROR_RESPONSE => {
                error = Some(PgError::from_server(backend::error_fields(body)?, false));
            }
            backend::READY_FOR_QUERY => {
                backend::ready_for_query(body)?;
                break;
            }
            _ => {}
        }
    }
    match (error, value) {
        (Some(e), _) => Err(e),
        (None, Some(v)) => Ok(v),
        (None, None) => Err(PgError::protocol(format!("\"{sql}\" returned no value"))),
    }
}

fn connect_target(
    settings: &Settings,
    target: &Target,
    replication: bool,
) -> Result<Established, PgError> {
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
) -> Result<Established, PgError> {
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
    // Still under the connect time-out: a server that stalls before ReadyForQuery is a
    // failed attempt like one that stalls during the login.
    let mut established = after_login(wire)?;
    established.wire.set_timeouts(None)?;
    Ok(established)
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
                ));
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

/// Reads the start-up messages that follow AuthenticationOk.
pub(crate) fn after_login(mut wire: Wire) -> Result<Established, PgError> {
    let mut parameters = Parameters::default();
    let (backend_pid, _cancel_key) = read_startup(&mut wire, &mut parameters)?;
    let server_version_num = parameters
        .get("server_version")
        .and_then(parse_server_version)
        .ok_or_else(|| PgError::protocol("the server did not report a usable server_version"))?;
    Ok(Established {
        wire,
        parameters,
        server_version_num,
        backend_pid,
    })
}

/// Reads the rest of the start-up: ParameterStatus, BackendKeyData, then ReadyForQuery.
fn read_startup(wire: &mut Wire, parameters: &mut Parameters) -> Result<(u32, Vec<u8>), PgError> {
    let mut key = (0, Vec::new());
    loop {
        let frame = wire.frame()?;
        let body = wire.body(&frame)?;
        match frame.tag {
            backend::PARAMETER_STATUS => {
                let (name, value) = backend::parameter_status(body)?;
                parameters.set(name, value);
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

/// `server_version` to `server_version_num`: "15.4 (Debian 15.4-1)" -> 150004,
/// "18beta1" -> 180000, "9.6.3" -> 90603; `None` for a number beyond `u32`.
pub(crate) fn parse_server_version(text: &str) -> Option<u32> {
    let version = text.split_whitespace().next()?;
    let mut numbers = version.split('.').map(|part| {
        let digits: String = part.chars().take_while(char::is_ascii_digit).collect();
        digits.parse::<u32>().ok()
    });
    let major = numbers.next()??;
    let second = numbers.next().flatten().unwrap_or(0);
    let num = if major >= 10 {
        major.checked_mul(10_000)?.checked_add(second)?
    } else {
        let third = numbers.next().flatten().unwrap_or(0);
        (major * 10_000)
            .checked_add(second.checked_mul(100)?)?
            .checked_add(third)?
    };
    Some(num)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]
    use super::{parse_server_version, Parameters};

    #[test]
    fn server_versions() {
        assert_eq!(
            parse_server_version("15.4 (Debian 15.4-1.pgdg120+1)"),
            Some(150_004)
        );
        assert_eq!(parse_server_version("18.1"), Some(180_001));
        assert_eq!(parse_server_version("18beta1"), Some(180_000));
        assert_eq!(parse_server_version("17devel"), Some(170_000));
        assert_eq!(parse_server_version("9.6.3"), Some(90_603));
        assert_eq!(parse_server_version(""), None);
        assert_eq!(parse_server_version("x"), None);
    }

    /// Found by the backend_messages fuzz target: a version number too large for u32
    /// overflowed (a panic in debug builds, a wrapped number in release builds).
    #[test]
    fn huge_server_versions_are_refused() {
        assert_eq!(parse_server_version("430000"), None);
        assert_eq!(parse_server_version("429496.7296"), None);
        assert_eq!(parse_server_version("429496.7295"), Some(u32::MAX));
        assert_eq!(parse_server_version("9.42949673.0"), None);
        assert_eq!(parse_server_version("9.0.4294967295"), None);
        assert_eq!(parse_server_version("4294967295"), None);
    }

    #[test]
    fn a_reported_parameter_replaces_the_earlier_value() {
        let mut parameters = Parameters::default();
        parameters.set("TimeZone".into(), "UTC".into());
        parameters.set("server_version".into(), "18.1".into());
        parameters.set("TimeZone".into(), "Europe/Berlin".into());
        assert_eq!(parameters.get("TimeZone"), Some("Europe/Berlin"));
        assert_eq!(parameters.get("server_version"), Some("18.1"));
        assert_eq!(parameters.get("timezone"), None);
    }
}
