//! Connection strings as libpq reads them (PostgreSQL documentation, "Connection
//! Strings", section 32.1.1 of the libpq chapter).
//!
//! Two forms:
//! * keyword/value: `host=db port=5432 password='it''s' options='-c x=1'`. Spaces around
//!   `=` are allowed; a value is either unquoted (ends at white space) or in single
//!   quotes; in both a backslash takes the next character literally (`\'`, `\\`).
//! * URI: `postgresql://[user[:password]@][host][:port][,host[:port]...][/dbname][?k=v&...]`
//!   (also `postgres://`); every part is percent-decoded, an IPv6 host is written in
//!   brackets, and a host that decodes to a path starting with `/` is a Unix-socket
//!   directory.
//!
//! [`ConnParams::parse`] records only what the string says. Environment variables,
//! `~/.pgpass` and the defaults are applied at connect time by `config::resolve`, so a
//! parsed `ConnParams` can be inspected and changed first. Errors name keys and
//! positions, never values: a value may be the password.

use std::fmt;

use super::error::PgError;

/// How TLS is negotiated (libpq's `sslmode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    /// Never TLS.
    Disable,
    /// Plain first; TLS only if the server refuses the plain connection.
    Allow,
    /// TLS if the server offers it, plain otherwise (the default).
    Prefer,
    /// TLS or nothing; the certificate is checked only if a root certificate file exists.
    Require,
    /// TLS, and the certificate chain must lead to a root in `sslrootcert`.
    VerifyCa,
    /// As verify-ca, and the certificate must name the host.
    VerifyFull,
}

impl SslMode {
    pub(crate) fn parse(value: &str) -> Result<Self, PgError> {
        Ok(match value {
            "disable" => SslMode::Disable,
            "allow" => SslMode::Allow,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            other => {
                return Err(PgError::config(format!(
                    "invalid sslmode value \"{other}\": expected disable, allow, prefer, \
                     require, verify-ca or verify-full"
                )))
            }
        })
    }
}

/// Whether SCRAM channel binding is used (libpq's `channel_binding`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChannelBindingMode {
    /// Never.
    Disable,
    /// When the connection is TLS and the server offers SCRAM-SHA-256-PLUS (default).
    Prefer,
    /// Always: the login fails unless the server authenticates with channel binding.
    Require,
}

impl ChannelBindingMode {
    pub(crate) fn parse(value: &str) -> Result<Self, PgError> {
        Ok(match value {
            "disable" => ChannelBindingMode::Disable,
            "prefer" => ChannelBindingMode::Prefer,
            "require" => ChannelBindingMode::Require,
            other => {
                return Err(PgError::config(format!(
                    "invalid channel_binding value \"{other}\": expected disable, prefer or require"
                )))
            }
        })
    }
}

/// Which server of a multi-host list a session may use (libpq's `target_session_attrs`):
/// each host is tried in turn and one of the wrong kind is passed over. Read-only-ness is
/// the `default_transaction_read_only` and `in_hot_standby` values the server reports at
/// start-up (PostgreSQL 14+), else `SHOW transaction_read_only` and
/// `pg_is_in_recovery()`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetSessionAttrs {
    /// The first server that accepts the login (the default).
    Any,
    /// A server whose sessions can write (after a failover: the new primary).
    ReadWrite,
    /// A server whose sessions are read-only (a standby, or `default_transaction_read_only`).
    ReadOnly,
    /// A server not in recovery.
    Primary,
    /// A server in recovery (a hot standby).
    Standby,
    /// A standby if one answers, else any server.
    PreferStandby,
}

impl TargetSessionAttrs {
    pub(crate) fn parse(value: &str) -> Result<Self, PgError> {
        Ok(match value {
            "any" => TargetSessionAttrs::Any,
            "read-write" => TargetSessionAttrs::ReadWrite,
            "read-only" => TargetSessionAttrs::ReadOnly,
            "primary" => TargetSessionAttrs::Primary,
            "standby" => TargetSessionAttrs::Standby,
            "prefer-standby" => TargetSessionAttrs::PreferStandby,
            other => {
                return Err(PgError::config(format!(
                    "invalid target_session_attrs value \"{other}\": expected any, read-write, \
                     read-only, primary, standby or prefer-standby"
                )))
            }
        })
    }
}

/// The settings a connection string gives explicitly. Empty values count as unset.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ConnParams {
    /// Host names, IP addresses or Unix-socket directories, comma-separated.
    pub host: Option<String>,
    /// Numeric addresses to connect to instead of resolving `host`, comma-separated.
    pub hostaddr: Option<String>,
    /// Ports, comma-separated (one for all hosts, or one per host).
    pub port: Option<String>,
    pub user: Option<String>,
    pub password: Option<String>,
    pub dbname: Option<String>,
    pub sslmode: Option<SslMode>,
    pub sslrootcert: Option<String>,
    pub application_name: Option<String>,
    pub fallback_application_name: Option<String>,
    /// Seconds, as written (checked when connecting, like libpq).
    pub connect_timeout: Option<String>,
    /// Command-line options for the server process (`-c name=value ...`).
    pub options: Option<String>,
    pub channel_binding: Option<ChannelBindingMode>,
    /// Password file instead of `~/.pgpass`.
    pub passfile: Option<String>,
    pub target_session_attrs: Option<TargetSessionAttrs>,
    /// Run-time parameters sent in the startup packet (see [`ConnParams::set_startup_parameter`]).
    pub startup_parameters: Vec<(String, String)>,
}

/// What `Debug` shows in place of a password (or of a variable holding one). Every
/// `Debug` of the client that could meet a password shows this instead, through
/// [`masked`] for an optional one.
pub(crate) const HIDDEN: &str = "<hidden>";

/// An optional password as `Debug` shows it: whether there is one, never its text.
pub(crate) fn masked<T>(password: Option<T>) -> Option<&'static str> {
    password.map(|_| HIDDEN)
}

// By hand, so that `{:?}` cannot print the password.
impl fmt::Debug for ConnParams {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnParams")
            .field("host", &self.host)
            .field("hostaddr", &self.hostaddr)
            .field("port", &self.port)
            .field("user", &self.user)
            .field("password", &masked(self.password.as_ref()))
            .field("dbname", &self.dbname)
            .field("sslmode", &self.sslmode)
            .field("sslrootcert", &self.sslrootcert)
            .field("application_name", &self.application_name)
            .field("connect_timeout", &self.connect_timeout)
            .field("options", &self.options)
            .field("channel_binding", &self.channel_binding)
            .field("passfile", &self.passfile)
            .field("target_session_attrs", &self.target_session_attrs)
            .field("startup_parameters", &self.startup_parameters)
            .finish_non_exhaustive()
    }
}

impl ConnParams {
    /// Parses a keyword/value string or a `postgres://` / `postgresql://` URI. An empty
    /// string gives all defaults.
    pub fn parse(dsn: &str) -> Result<ConnParams, PgError> {
        let mut params = ConnParams::default();
        if let Some(rest) = strip_uri_prefix(dsn) {
            super::uri::parse_uri(rest, &mut |key, value| params.set(key, value))?;
        } else {
            for (key, value) in parse_keyword_value(dsn)? {
                params.set(&key, value)?;
            }
        }
        Ok(params)
    }

    /// Sets one setting by its libpq keyword. Unknown keywords are an error, as in libpq:
    /// a misspelt `sslmode` must not silently connect without TLS.
    pub fn set(&mut self, key: &str, value: String) -> Result<(), PgError> {
        // libpq treats an empty value like an absent one for every setting used here.
        let value = (!value.is_empty()).then_some(value);
        match key {
            "host" => self.host = value,
            "hostaddr" => self.hostaddr = value,
            "port" => self.port = value,
            "user" => self.user = value,
            "password" => self.password = value,
            "dbname" => self.dbname = value,
            "sslmode" => self.sslmode = value.as_deref().map(SslMode::parse).transpose()?,
            // libpq's URI spelling `ssl=true` means sslmode=require.
            "ssl" => match value.as_deref() {
                Some("true") => self.sslmode = Some(SslMode::Require),
                None => {}
                Some(_) => {
                    return Err(PgError::config(
                        "invalid ssl value: only \"true\" is allowed",
                    ))
                }
            },
            "sslrootcert" => self.sslrootcert = value,
            "application_name" => self.application_name = value,
            "fallback_application_name" => self.fallback_application_name = value,
            "connect_timeout" => self.connect_timeout = value,
            "options" => self.options = value,
            "channel_binding" => {
                self.channel_binding = value
                    .as_deref()
                    .map(ChannelBindingMode::parse)
                    .transpose()?;
            }
            "passfile" => self.passfile = value,
            "target_session_attrs" => {
                self.target_session_attrs = value
                    .as_deref()
                    .map(TargetSessionAttrs::parse)
                    .transpose()?;
            }
            "replication" => {
                return Err(PgError::config(
                    "the replication keyword is not accepted in the connection string; \
                     the caller chooses a replication connection",
                ))
            }
            other if LIBPQ_KEYWORDS.contains(&other) => {
                return Err(PgError::config(format!(
                    "connection option \"{other}\" is not supported by pgwire_cdc"
                )))
            }
            _ => {
                return Err(PgError::config(
                    "invalid connection option (not a libpq keyword; not shown, as it may \
                     be part of a password)",
                ))
            }
        }
        Ok(())
    }

    /// Adds a run-time parameter to the startup packet (like `-c name=value` in `options`,
    /// without quoting rules). Used for the session settings the decoder relies on.
    pub fn set_startup_parameter(&mut self, name: &str, value: &str) {
        self.startup_parameters.retain(|(n, _)| n != name);
        self.startup_parameters
            .push((name.to_owned(), value.to_owned()));
    }
}

/// libpq keywords this client does not implement: named in errors. Any other unknown word
/// is not repeated in an error, since it can be a piece of a mistyped password
/// (`password=two words` makes `words` a keyword).
const LIBPQ_KEYWORDS: &[&str] = &[
    "client_encoding",
    "gssencmode",
    "gssdelegation",
    "gsslib",
    "keepalives",
    "keepalives_count",
    "keepalives_idle",
    "keepalives_interval",
    "krbsrvname",
    "load_balance_hosts",
    "max_protocol_version",
    "min_protocol_version",
    "require_auth",
    "requirepeer",
    "service",
    "ssl_max_protocol_version",
    "ssl_min_protocol_version",
    "sslcert",
    "sslcertmode",
    "sslcompression",
    "sslcrl",
    "sslcrldir",
    "sslkey",
    "sslnegotiation",
    "sslpassword",
    "sslsni",
    "tcp_user_timeout",
];

fn strip_uri_prefix(dsn: &str) -> Option<&str> {
    let trimmed = dsn.trim_start();
    trimmed
        .strip_prefix("postgresql://")
        .or_else(|| trimmed.strip_prefix("postgres://"))
}

/// Splits a keyword/value string into its pairs, undoing quotes and backslash escapes.
pub(crate) fn parse_keyword_value(input: &str) -> Result<Vec<(String, String)>, PgError> {
    let mut pairs = Vec::new();
    let mut chars = input.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.peek().is_none() {
            return Ok(pairs);
        }
        let mut key = String::new();
        while let Some(c) = chars.next_if(|c| *c != '=' && !c.is_whitespace()) {
            key.push(c);
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.next() != Some('=') {
            return Err(PgError::config(format!(
                "missing \"=\" after word {} of the connection string (a keyword=value \
                 pair was expected; quote values that contain spaces)",
                pairs.len() + 1
            )));
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if_eq(&'\'').is_some() {
            loop {
                match chars.next() {
                    None => return Err(unterminated(&key)),
                    Some('\'') => break,
                    Some('\\') => match chars.next() {
                        Some(c) => value.push(c),
                        None => return Err(unterminated(&key)),
                    },
                    Some(c) => value.push(c),
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                if c == '\\' {
                    // libpq drops a lone backslash at the very end.
                    if let Some(escaped) = chars.next() {
                        value.push(escaped);
                    }
                } else {
                    value.push(c);
                }
            }
        }
        pairs.push((key, value));
    }
}

fn unterminated(key: &str) -> PgError {
    let shown = if KNOWN_KEYWORDS.contains(&key) || LIBPQ_KEYWORDS.contains(&key) {
        format!(" (value of \"{key}\")")
    } else {
        String::new()
    };
    PgError::config(format!(
        "unterminated quoted string in the connection string{shown}"
    ))
}

/// The keywords [`ConnParams::set`] accepts.
pub(crate) const KNOWN_KEYWORDS: &[&str] = &[
    "host",
    "hostaddr",
    "port",
    "user",
    "password",
    "dbname",
    "sslmode",
    "ssl",
    "sslrootcert",
    "application_name",
    "fallback_application_name",
    "connect_timeout",
    "options",
    "channel_binding",
    "passfile",
];
