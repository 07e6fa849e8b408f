//! From [`ConnParams`] to what a connection attempt needs: explicit settings first, then
//! the libpq environment variables, then libpq's defaults (libpq chapter, "Environment
//! Variables" and "Parameter Key Words").
//!
//! Defaults: host = `PGHOST`, else the Unix-socket directory `/var/run/postgresql` when it
//! exists, else `localhost`; port 5432; user = `PGUSER`, else the OS user; dbname =
//! `PGDATABASE`, else the user name; sslmode prefer; channel_binding prefer;
//! target_session_attrs any; sslrootcert
//! `~/.postgresql/root.crt`. The password is the explicit one, else `PGPASSWORD`, else the
//! first matching line of the password file (per host, since hosts can differ).

use std::collections::HashMap;
use std::net::IpAddr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::dsn::{masked, ChannelBindingMode, ConnParams, SslMode, TargetSessionAttrs, HIDDEN};
use super::error::PgError;
use super::pgpass;

/// Where libpq looks for the server's socket when no host is given (Debian's build).
pub const DEFAULT_SOCKET_DIR: &str = "/var/run/postgresql";
pub const DEFAULT_PORT: u16 = 5432;

/// The process environment, captured so that resolution is testable without touching
/// the real one.
#[derive(Clone, Default)]
pub struct Environment {
    pub vars: HashMap<String, String>,
    pub home: Option<PathBuf>,
    pub os_user: Option<String>,
    /// `DEFAULT_SOCKET_DIR` when it exists on this machine.
    pub default_socket_dir: Option<PathBuf>,
}

/// The variables holding a password: `Debug` shows only that they are set.
const SECRET_VARS: &[&str] = &["PGPASSWORD"];

// By hand, so that `{:?}` cannot print `PGPASSWORD`.
impl std::fmt::Debug for Environment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let vars: std::collections::BTreeMap<&str, &str> = self
            .vars
            .iter()
            .map(|(name, value)| {
                let shown = if SECRET_VARS.contains(&name.as_str()) {
                    HIDDEN
                } else {
                    value.as_str()
                };
                (name.as_str(), shown)
            })
            .collect();
        f.debug_struct("Environment")
            .field("vars", &vars)
            .field("home", &self.home)
            .field("os_user", &self.os_user)
            .field("default_socket_dir", &self.default_socket_dir)
            .finish()
    }
}

impl Environment {
    pub fn from_process() -> Self {
        let vars: HashMap<String, String> = std::env::vars().collect();
        let passwd = passwd_entry();
        let home = vars
            .get("HOME")
            .filter(|h| !h.is_empty())
            .map(PathBuf::from)
            .or_else(|| passwd.as_ref().map(|(_, home)| PathBuf::from(home)));
        let os_user = passwd.map(|(name, _)| name).or_else(|| {
            ["USER", "LOGNAME"]
                .iter()
                .find_map(|k| vars.get(*k).filter(|v| !v.is_empty()).cloned())
        });
        let default_socket_dir = Some(PathBuf::from(DEFAULT_SOCKET_DIR)).filter(|p| p.is_dir());
        Environment {
            vars,
            home,
            os_user,
            default_socket_dir,
        }
    }

    fn var(&self, name: &str) -> Option<&str> {
        self.vars
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }
}

/// Name and home directory of the effective user, from /etc/passwd (the owner of
/// /proc/self is the process's effective uid). No libc call needed.
fn passwd_entry() -> Option<(String, String)> {
    let uid = std::fs::metadata("/proc/self").ok()?.uid();
    let text = std::fs::read_to_string("/etc/passwd").ok()?;
    text.lines().find_map(|line| {
        let mut fields = line.split(':');
        let name = fields.next()?;
        let entry_uid: u32 = fields.nth(1)?.parse().ok()?;
        let home = fields.nth(2)?;
        (entry_uid == uid).then(|| (name.to_owned(), home.to_owned()))
    })
}

/// One server to try.
#[derive(Clone, PartialEq, Eq)]
pub struct Target {
    /// The host as configured: a name, an address or a socket directory. TLS checks the
    /// certificate against it and the password file is matched on it.
    pub host: String,
    pub addr: TargetAddr,
    pub port: u16,
    /// Never shown by `Debug`.
    pub password: Option<String>,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("host", &self.host)
            .field("addr", &self.addr)
            .field("port", &self.port)
            .field("password", &masked(self.password.as_ref()))
            .finish()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetAddr {
    /// The socket file `<dir>/.s.PGSQL.<port>`.
    Unix(PathBuf),
    Ip(IpAddr),
    /// A DNS name, resolved when connecting.
    Name(String),
}

impl Target {
    /// How errors name this server: never with the password.
    pub fn describe(&self) -> String {
        match &self.addr {
            TargetAddr::Unix(path) => format!("socket \"{}\"", path.display()),
            TargetAddr::Ip(ip) if ip.to_string() != self.host => {
                format!("server at \"{}\" ({ip}), port {}", self.host, self.port)
            }
            _ => format!("server at \"{}\", port {}", self.host, self.port),
        }
    }
}

/// Everything a connection attempt needs, defaults applied.
#[derive(Clone)]
pub struct Settings {
    pub targets: Vec<Target>,
    pub user: String,
    pub dbname: String,
    pub sslmode: SslMode,
    pub sslrootcert: Option<PathBuf>,
    pub application_name: Option<String>,
    pub connect_timeout: Option<Duration>,
    pub options: Option<String>,
    pub channel_binding: ChannelBindingMode,
    pub target_session_attrs: TargetSessionAttrs,
    pub startup_parameters: Vec<(String, String)>,
}

/// Applies the environment and the defaults to `params`.
pub fn resolve(params: &ConnParams, env: &Environment) -> Result<Settings, PgError> {
    let pick = |explicit: &Option<String>, var: &str| -> Option<String> {
        explicit.clone().or_else(|| env.var(var).map(str::to_owned))
    };

    let user = pick(&params.user, "PGUSER")
        .or_else(|| env.os_user.clone())
        .ok_or_else(|| PgError::config("no user name given and the OS user is unknown"))?;
    let dbname = pick(&params.dbname, "PGDATABASE").unwrap_or_else(|| user.clone());
    let sslmode = match &params.sslmode {
        Some(mode) => *mode,
        None => env
            .var("PGSSLMODE")
            .map(SslMode::parse)
            .transpose()?
            .unwrap_or(SslMode::Prefer),
    };
    let channel_binding = match &params.channel_binding {
        Some(mode) => *mode,
        None => env
            .var("PGCHANNELBINDING")
            .map(ChannelBindingMode::parse)
            .transpose()?
            .unwrap_or(ChannelBindingMode::Prefer),
    };
    let target_session_attrs = match &params.target_session_attrs {
        Some(attrs) => *attrs,
        None => env
            .var("PGTARGETSESSIONATTRS")
            .map(TargetSessionAttrs::parse)
            .transpose()?
            .unwrap_or(TargetSessionAttrs::Any),
    };
    let explicit_root = pick(&params.sslrootcert, "PGSSLROOTCERT");
    if explicit_root.as_deref() == Some("system") {
        return Err(PgError::config(
            "sslrootcert=system (the operating system's certificate store) is not supported; \
             give the path of a root certificate file",
        ));
    }
    let sslrootcert = explicit_root
        .map(|path| expand_home(&path, env))
        .or_else(|| {
            env.home
                .as_ref()
                .map(|h| h.join(".postgresql").join("root.crt"))
        });
    let application_name = pick(&params.application_name, "PGAPPNAME")
        .or_else(|| params.fallback_application_name.clone());
    let connect_timeout = pick(&params.connect_timeout, "PGCONNECT_TIMEOUT")
        .map(|text| parse_timeout(&text))
        .transpose()?
        .flatten();
    let options = pick(&params.options, "PGOPTIONS");

    let password = pick(&params.password, "PGPASSWORD");
    let passfile = pick(&params.passfile, "PGPASSFILE")
        .map(|p| expand_home(&p, env))
        .or_else(|| env.home.as_ref().map(|h| h.join(".pgpass")));

    let mut targets = targets(params, env)?;
    for target in &mut targets {
        target.password = match &password {
            Some(pw) => Some(pw.clone()),
            None => passfile
                .as_deref()
                .and_then(|file| pgpass_password(file, target, &dbname, &user)),
        };
    }

    Ok(Settings {
        targets,
        user,
        dbname,
        sslmode,
        sslrootcert,
        application_name,
        connect_timeout,
        options,
        channel_binding,
        target_session_attrs,
        startup_parameters: params.startup_parameters.clone(),
    })
}

fn expand_home(path: &str, env: &Environment) -> PathBuf {
    match (path.strip_prefix("~/"), &env.home) {
        (Some(rest), Some(home)) => home.join(rest),
        _ => PathBuf::from(path),
    }
}

/// libpq: an integer number of seconds; zero or negative waits forever; 1 becomes 2
/// (a one-second limit could expire almost at once after rounding).
fn parse_timeout(text: &str) -> Result<Option<Duration>, PgError> {
    let secs: i64 = text.trim().parse().map_err(|_| {
        PgError::config(format!(
            "invalid integer value \"{text}\" for connect_timeout"
        ))
    })?;
    Ok((secs > 0).then(|| Duration::from_secs(secs.max(2).unsigned_abs())))
}

fn split_list(text: Option<&str>) -> Vec<String> {
    text.map(|t| t.split(',').map(|s| s.trim().to_owned()).collect())
        .unwrap_or_default()
}

fn targets(params: &ConnParams, env: &Environment) -> Result<Vec<Target>, PgError> {
    let host_text = params.host.as_deref().or_else(|| env.var("PGHOST"));
    let addr_text = params.hostaddr.as_deref().or_else(|| env.var("PGHOSTADDR"));
    let port_text = params.port.as_deref().or_else(|| env.var("PGPORT"));
    let hosts = split_list(host_text);
    let addrs = split_list(addr_text);
    let ports = split_list(port_text);

    let count = hosts.len().max(addrs.len()).max(1);
    if !hosts.is_empty() && !addrs.is_empty() && hosts.len() != addrs.len() {
        return Err(PgError::config(format!(
            "could not match {} host names to {} hostaddr values",
            hosts.len(),
            addrs.len()
        )));
    }
    if ports.len() > 1 && ports.len() != count {
        return Err(PgError::config(format!(
            "could not match {} port numbers to {count} hosts",
            ports.len()
        )));
    }

    (0..count)
        .map(|i| {
            let host = hosts.get(i).map(String::as_str).unwrap_or_default();
            let hostaddr = addrs.get(i).map(String::as_str).unwrap_or_default();
            let port_text = ports.get(i).or_else(|| ports.first()).map(String::as_str);
            let port = match port_text {
                None | Some("") => DEFAULT_PORT,
                Some(p) => p
                    .parse::<u16>()
                    .ok()
                    .filter(|p| *p != 0)
                    .ok_or_else(|| PgError::config(format!("invalid port number: \"{p}\"")))?,
            };
            target(host, hostaddr, port, env)
        })
        .collect()
}

fn target(host: &str, hostaddr: &str, port: u16, env: &Environment) -> Result<Target, PgError> {
    if !hostaddr.is_empty() {
        let ip: IpAddr = hostaddr.parse().map_err(|_| {
            PgError::config(format!("could not parse network address \"{hostaddr}\""))
        })?;
        let host = if host.is_empty() { hostaddr } else { host };
        return Ok(Target {
            host: host.to_owned(),
            addr: TargetAddr::Ip(ip),
            port,
            password: None,
        });
    }
    let host = if host.is_empty() {
        match &env.default_socket_dir {
            Some(dir) => dir.to_string_lossy().into_owned(),
            None => "localhost".to_owned(),
        }
    } else {
        host.to_owned()
    };
    let addr = if host.starts_with('/') {
        TargetAddr::Unix(Path::new(&host).join(format!(".s.PGSQL.{port}")))
    } else if let Ok(ip) = host.parse::<IpAddr>() {
        TargetAddr::Ip(ip)
    } else {
        TargetAddr::Name(host.clone())
    };
    Ok(Target {
        host,
        addr,
        port,
        password: None,
    })
}

fn pgpass_password(file: &Path, target: &Target, dbname: &str, user: &str) -> Option<String> {
    // libpq matches a connection to the default socket directory as "localhost".
    let host = if target.host == DEFAULT_SOCKET_DIR {
        "localhost"
    } else {
        target.host.as_str()
    };
    let port = target.port.to_string();
    let key = pgpass::PassKey {
        host,
        port: &port,
        dbname,
        user,
    };
    pgpass::lookup(file, &key).ok().flatten()
}
