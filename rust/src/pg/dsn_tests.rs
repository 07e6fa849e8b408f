//! Connection strings, URIs, environment precedence and the password file, checked
//! against what libpq makes of the same input.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

use std::collections::HashMap;
use std::net::IpAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::Duration;

use super::config::{resolve, Environment, Settings, TargetAddr};
use super::dsn::{parse_keyword_value, ChannelBindingMode, ConnParams, SslMode};
use super::pgpass::{self, PassKey};
use super::PgError;

fn pairs(input: &str) -> Vec<(String, String)> {
    parse_keyword_value(input).unwrap()
}

fn kv(items: &[(&str, &str)]) -> Vec<(String, String)> {
    items
        .iter()
        .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
        .collect()
}

#[test]
fn keyword_value_quoting_and_escapes() {
    let cases: &[(&str, &[(&str, &str)])] = &[
        ("", &[]),
        ("   ", &[]),
        ("host=a port=5", &[("host", "a"), ("port", "5")]),
        ("host = a\tport= 5 ", &[("host", "a"), ("port", "5")]),
        ("password='it\\'s'", &[("password", "it's")]),
        ("password='a b\\\\c'", &[("password", "a b\\c")]),
        ("options='-c a=1 -c b=2'", &[("options", "-c a=1 -c b=2")]),
        ("password=a\\ b", &[("password", "a b")]),
        ("password=''", &[("password", "")]),
        ("password='x'host=h", &[("password", "x"), ("host", "h")]),
        ("user=ü dbname=d\\=x", &[("user", "ü"), ("dbname", "d=x")]),
        ("password=abc\\", &[("password", "abc")]),
    ];
    for (input, expected) in cases {
        assert_eq!(pairs(input), kv(expected), "{input}");
    }
}

#[test]
fn malformed_strings_never_show_the_password() {
    for input in [
        "password='s3cr3t",
        "password='s3cr3t\\",
        "user=u password=s3cr3t host",
        "password=s3cr3t bogus=1",
        "s3cr3t",
        "password=two s3cr3t",
        "password=two s3cr3t=x",
        "password=two s3cr3t='x",
        "postgresql://h/db?password=x&s3cr3t=1",
    ] {
        let err = ConnParams::parse(input).unwrap_err();
        assert!(matches!(err, PgError::Config(_)), "{input}: {err:?}");
        let text = err.to_string();
        assert!(!text.contains("s3cr3t"), "{input}: {text}");
    }
    // Unsupported libpq keywords are named, so the user knows what to drop.
    let err = ConnParams::parse("sslcert=/c.crt").unwrap_err().to_string();
    assert!(err.contains("\"sslcert\" is not supported"), "{err}");
    let params = ConnParams::parse("password=s3cr3t").unwrap();
    assert!(!format!("{params:?}").contains("s3cr3t"));
}

#[test]
fn keywords_are_checked() {
    let p = ConnParams::parse(
        "host=h hostaddr=127.0.0.1 port=6 user=u password=pw dbname=d sslmode=verify-full \
         sslrootcert=/r.crt application_name=app connect_timeout=10 options='-c x=y' \
         channel_binding=require passfile=/pp fallback_application_name=fb",
    )
    .unwrap();
    assert_eq!(p.host.as_deref(), Some("h"));
    assert_eq!(p.hostaddr.as_deref(), Some("127.0.0.1"));
    assert_eq!(p.port.as_deref(), Some("6"));
    assert_eq!(p.user.as_deref(), Some("u"));
    assert_eq!(p.password.as_deref(), Some("pw"));
    assert_eq!(p.dbname.as_deref(), Some("d"));
    assert_eq!(p.sslmode, Some(SslMode::VerifyFull));
    assert_eq!(p.sslrootcert.as_deref(), Some("/r.crt"));
    assert_eq!(p.application_name.as_deref(), Some("app"));
    assert_eq!(p.connect_timeout.as_deref(), Some("10"));
    assert_eq!(p.options.as_deref(), Some("-c x=y"));
    assert_eq!(p.channel_binding, Some(ChannelBindingMode::Require));
    assert_eq!(p.passfile.as_deref(), Some("/pp"));
    assert_eq!(p.fallback_application_name.as_deref(), Some("fb"));

    for bad in [
        "sslmode=required",
        "channel_binding=yes",
        "sslmod=require",
        "replication=database",
        "=x",
    ] {
        assert!(
            matches!(ConnParams::parse(bad), Err(PgError::Config(_))),
            "{bad}"
        );
    }
    // The last of a repeated keyword wins; empty means unset.
    let p = ConnParams::parse("host=a host=b user=").unwrap();
    assert_eq!(p.host.as_deref(), Some("b"));
    assert_eq!(p.user, None);
}

#[test]
fn uris() {
    let p = ConnParams::parse(
        "postgresql://us%40er:p%3Ass%2Fw%25rd@db.example.com:6543/my%20db?sslmode=require&application_name=a%26b",
    )
    .unwrap();
    assert_eq!(p.user.as_deref(), Some("us@er"));
    assert_eq!(p.password.as_deref(), Some("p:ss/w%rd"));
    assert_eq!(p.host.as_deref(), Some("db.example.com"));
    assert_eq!(p.port.as_deref(), Some("6543"));
    assert_eq!(p.dbname.as_deref(), Some("my db"));
    assert_eq!(p.sslmode, Some(SslMode::Require));
    assert_eq!(p.application_name.as_deref(), Some("a&b"));

    let p = ConnParams::parse("postgres://[::1]:5433,[fe80::1%25eth0],other:5/db").unwrap();
    assert_eq!(p.host.as_deref(), Some("::1,fe80::1%eth0,other"));
    assert_eq!(p.port.as_deref(), Some("5433,,5"));
    assert_eq!(p.dbname.as_deref(), Some("db"));

    let p = ConnParams::parse("postgresql://%2Fvar%2Frun%2Fpostgresql/db").unwrap();
    assert_eq!(p.host.as_deref(), Some("/var/run/postgresql"));

    let p = ConnParams::parse("postgresql:///db?host=/tmp&port=5444&ssl=true").unwrap();
    assert_eq!(p.host.as_deref(), Some("/tmp"));
    assert_eq!(p.port.as_deref(), Some("5444"));
    assert_eq!(p.sslmode, Some(SslMode::Require));

    let p = ConnParams::parse("postgresql://").unwrap();
    assert_eq!(p, ConnParams::default());

    let p = ConnParams::parse("postgresql://user@host").unwrap();
    assert_eq!(p.user.as_deref(), Some("user"));
    assert_eq!(p.host.as_deref(), Some("host"));
    assert_eq!(p.dbname, None);

    // '@' after the first '/' belongs to the database name, not the credentials.
    let p = ConnParams::parse("postgresql://host/db@x").unwrap();
    assert_eq!(p.user, None);
    assert_eq!(p.dbname.as_deref(), Some("db@x"));

    for bad in [
        "postgresql://[::1/db",
        "postgresql://[]/db",
        "postgresql://[::1]x/db",
        "postgresql://h/db?sslmode",
        "postgresql://h/db?a=b=c",
        "postgresql://h/db?nosuch=1",
        "postgresql://h/%zz",
        "postgresql://h/a%00b",
        "postgresql://h/%ff",
        "postgresql://u:s3cr3t%@h/db",
        "postgresql://u:s3cr3t%0@h/db",
    ] {
        let err = ConnParams::parse(bad).unwrap_err();
        assert!(matches!(err, PgError::Config(_)), "{bad}");
        assert!(!err.to_string().contains("s3cr3t"), "{bad}: {err}");
    }
}

fn env(vars: &[(&str, &str)]) -> Environment {
    Environment {
        vars: vars
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect::<HashMap<_, _>>(),
        home: Some(PathBuf::from("/nonexistent-home")),
        os_user: Some("osuser".into()),
        default_socket_dir: None,
    }
}

fn settings(dsn: &str, vars: &[(&str, &str)]) -> Settings {
    resolve(&ConnParams::parse(dsn).unwrap(), &env(vars)).unwrap()
}

/// Every `Debug` on the way from a connection string to a connection attempt masks the
/// password the same way: the string's, `PGPASSWORD`'s, and the one a target carries.
#[test]
fn debug_output_masks_every_password_the_same_way() {
    let params = ConnParams::parse("host=h user=u password=s3cr3t").unwrap();
    let shown = format!("{params:?}");
    assert!(shown.contains("password: Some(\"<hidden>\")"), "{shown}");
    assert!(!shown.contains("s3cr3t"), "{shown}");

    let environment = env(&[("PGPASSWORD", "s3cr3t"), ("PGUSER", "u")]);
    let shown = format!("{environment:?}");
    assert!(shown.contains("\"PGPASSWORD\": \"<hidden>\""), "{shown}");
    assert!(shown.contains("\"PGUSER\": \"u\""), "{shown}");
    assert!(!shown.contains("s3cr3t"), "{shown}");

    for s in [
        settings("host=h password=s3cr3t", &[]),
        settings("host=h", &[("PGPASSWORD", "s3cr3t")]),
    ] {
        let target = &s.targets[0];
        assert_eq!(target.password.as_deref(), Some("s3cr3t"));
        let shown = format!("{target:?}");
        assert!(shown.contains("password: Some(\"<hidden>\")"), "{shown}");
        assert!(!shown.contains("s3cr3t"), "{shown}");
    }
    let unset = settings("host=h", &[]);
    assert!(format!("{:?}", unset.targets[0]).contains("password: None"));
}

#[test]
fn defaults() {
    let s = settings("", &[]);
    assert_eq!(s.user, "osuser");
    assert_eq!(s.dbname, "osuser");
    assert_eq!(s.sslmode, SslMode::Prefer);
    assert_eq!(s.channel_binding, ChannelBindingMode::Prefer);
    assert_eq!(s.connect_timeout, None);
    assert_eq!(
        s.sslrootcert,
        Some(PathBuf::from("/nonexistent-home/.postgresql/root.crt"))
    );
    assert_eq!(s.targets.len(), 1);
    assert_eq!(s.targets[0].host, "localhost");
    assert_eq!(s.targets[0].port, 5432);
    assert_eq!(s.targets[0].addr, TargetAddr::Name("localhost".into()));
    assert_eq!(s.targets[0].password, None);

    // With the socket directory present, the default is a Unix socket.
    let mut e = env(&[]);
    e.default_socket_dir = Some(PathBuf::from("/var/run/postgresql"));
    let s = resolve(&ConnParams::default(), &e).unwrap();
    assert_eq!(
        s.targets[0].addr,
        TargetAddr::Unix(PathBuf::from("/var/run/postgresql/.s.PGSQL.5432"))
    );
}

#[test]
fn explicit_settings_beat_the_environment() {
    let vars = [
        ("PGHOST", "envhost"),
        ("PGPORT", "7777"),
        ("PGUSER", "envuser"),
        ("PGPASSWORD", "envpw"),
        ("PGDATABASE", "envdb"),
        ("PGSSLMODE", "disable"),
        ("PGSSLROOTCERT", "/env/root.crt"),
        ("PGAPPNAME", "envapp"),
        ("PGCONNECT_TIMEOUT", "9"),
        ("PGCHANNELBINDING", "disable"),
    ];
    let s = settings("", &vars);
    assert_eq!(s.targets[0].host, "envhost");
    assert_eq!(s.targets[0].port, 7777);
    assert_eq!(s.user, "envuser");
    assert_eq!(s.targets[0].password.as_deref(), Some("envpw"));
    assert_eq!(s.dbname, "envdb");
    assert_eq!(s.sslmode, SslMode::Disable);
    assert_eq!(s.sslrootcert, Some(PathBuf::from("/env/root.crt")));
    assert_eq!(s.application_name.as_deref(), Some("envapp"));
    assert_eq!(s.connect_timeout, Some(Duration::from_secs(9)));
    assert_eq!(s.channel_binding, ChannelBindingMode::Disable);

    let s = settings(
        "host=h port=1 user=u password=pw dbname=d sslmode=require sslrootcert=/r \
         application_name=a connect_timeout=3 channel_binding=require",
        &vars,
    );
    assert_eq!(s.targets[0].host, "h");
    assert_eq!(s.targets[0].port, 1);
    assert_eq!(s.user, "u");
    assert_eq!(s.targets[0].password.as_deref(), Some("pw"));
    assert_eq!(s.dbname, "d");
    assert_eq!(s.sslmode, SslMode::Require);
    assert_eq!(s.sslrootcert, Some(PathBuf::from("/r")));
    assert_eq!(s.application_name.as_deref(), Some("a"));
    assert_eq!(s.connect_timeout, Some(Duration::from_secs(3)));
    assert_eq!(s.channel_binding, ChannelBindingMode::Require);

    // dbname defaults to the user actually used, however it was found.
    assert_eq!(settings("user=x", &[]).dbname, "x");
    assert_eq!(settings("", &[("PGUSER", "y")]).dbname, "y");
    // fallback_application_name only when nothing else names the application.
    assert_eq!(
        settings("fallback_application_name=fb", &[])
            .application_name
            .as_deref(),
        Some("fb")
    );
    assert_eq!(
        settings("fallback_application_name=fb", &[("PGAPPNAME", "e")])
            .application_name
            .as_deref(),
        Some("e")
    );
    // A bad environment value is an error too, not silently ignored.
    let bad = resolve(&ConnParams::default(), &env(&[("PGSSLMODE", "bogus")]));
    assert!(matches!(bad, Err(PgError::Config(_))));
}

#[test]
fn hosts_addresses_and_ports() {
    let s = settings("host=/tmp port=5999", &[]);
    assert_eq!(
        s.targets[0].addr,
        TargetAddr::Unix(PathBuf::from("/tmp/.s.PGSQL.5999"))
    );
    let s = settings("host=wronghost hostaddr=127.0.0.1", &[]);
    assert_eq!(s.targets[0].host, "wronghost");
    assert_eq!(
        s.targets[0].addr,
        TargetAddr::Ip("127.0.0.1".parse::<IpAddr>().unwrap())
    );
    let s = settings("hostaddr=::1", &[]);
    assert_eq!(s.targets[0].host, "::1");
    let s = settings("host=a,b,[x] port=1,2,3", &[]);
    let ports: Vec<u16> = s.targets.iter().map(|t| t.port).collect();
    assert_eq!(ports, [1, 2, 3]);
    let s = settings("host=a,b port=9", &[]);
    assert_eq!(s.targets.iter().map(|t| t.port).collect::<Vec<_>>(), [9, 9]);
    let s = settings("postgresql://[::1]:5,10.0.0.1/db", &[]);
    assert_eq!(s.targets[0].addr, TargetAddr::Ip("::1".parse().unwrap()));
    assert_eq!(s.targets[0].port, 5);
    assert_eq!(s.targets[1].port, 5432);

    for bad in [
        "host=a,b port=1,2,3",
        "host=a,b hostaddr=127.0.0.1",
        "port=0",
        "port=70000",
        "port=x",
        "hostaddr=not-an-ip",
        "connect_timeout=soon",
        "sslrootcert=system",
    ] {
        let r = resolve(&ConnParams::parse(bad).unwrap(), &env(&[]));
        assert!(matches!(r, Err(PgError::Config(_))), "{bad}");
    }
}

#[test]
fn connect_timeout_like_libpq() {
    let t = |v: &str| settings(&format!("connect_timeout={v}"), &[]).connect_timeout;
    assert_eq!(t("0"), None);
    assert_eq!(t("-5"), None);
    assert_eq!(t("1"), Some(Duration::from_secs(2)));
    assert_eq!(t(" 30 "), Some(Duration::from_secs(30)));
}

fn key<'a>(host: &'a str, port: &'a str, db: &'a str, user: &'a str) -> PassKey<'a> {
    PassKey {
        host,
        port,
        dbname: db,
        user,
    }
}

#[test]
fn pgpass_lines() {
    let file = "\
# comment:*:*:*:nope
db.example.com:5432:app:alice:first
*:5432:*:bob:b\\:o\\\\b:ignored
h\\:x:*:*:*:escaped-host
\\*:*:*:carol:literal-star
*:*:*:carol:any-host
short:line
";
    let cases = [
        (key("db.example.com", "5432", "app", "alice"), Some("first")),
        (key("db.example.com", "5433", "app", "alice"), None),
        (key("other", "5432", "x", "bob"), Some("b:o\\b")),
        (key("h:x", "1", "d", "u"), Some("escaped-host")),
        (key("*", "1", "d", "carol"), Some("literal-star")),
        (key("anything", "1", "d", "carol"), Some("any-host")),
        (key("short", "line", "d", "u"), None),
    ];
    for (k, expected) in cases {
        assert_eq!(
            pgpass::find(file, &k).as_deref(),
            expected,
            "{} {} {} {}",
            k.host,
            k.port,
            k.dbname,
            k.user
        );
    }
    // Windows line ends are tolerated.
    assert_eq!(
        pgpass::find("*:*:*:*:pw\r\n", &key("h", "1", "d", "u")).as_deref(),
        Some("pw")
    );
}

/// A fresh file in the temp directory holding `text` with `mode`.
fn temp_file(name: &str, text: &str, mode: u32) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pgwire_cdc-pgpass-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    path
}

#[test]
fn pgpass_file_permissions_like_libpq() {
    let k = key("h", "5432", "d", "u");
    let private = temp_file("private", "h:5432:d:u:filepw\n", 0o600);
    assert_eq!(pgpass::lookup(&private, &k), Ok(Some("filepw".into())));
    let readable = temp_file("readable", "h:5432:d:u:filepw\n", 0o644);
    assert_eq!(
        pgpass::lookup(&readable, &k),
        Err(pgpass::Skipped::Permissions)
    );
    let group = temp_file("group", "h:5432:d:u:filepw\n", 0o620);
    assert_eq!(
        pgpass::lookup(&group, &k),
        Err(pgpass::Skipped::Permissions)
    );
    let dir = private.parent().unwrap().to_path_buf();
    assert_eq!(pgpass::lookup(&dir, &k), Err(pgpass::Skipped::NotAFile));
    assert_eq!(
        pgpass::lookup(&dir.join("missing"), &k),
        Err(pgpass::Skipped::Missing)
    );

    // Through resolution: the file is used only when no password is given otherwise,
    // and matched per host (the default socket directory as "localhost").
    let passfile = temp_file(
        "resolve",
        "localhost:5432:d:u:socketpw\nh2:5432:d:u:h2pw\n",
        0o600,
    );
    let dsn = format!(
        "host=/var/run/postgresql,h2 user=u dbname=d passfile={}",
        passfile.display()
    );
    let s = settings(&dsn, &[]);
    assert_eq!(s.targets[0].password.as_deref(), Some("socketpw"));
    assert_eq!(s.targets[1].password.as_deref(), Some("h2pw"));
    let s = settings(&dsn, &[("PGPASSWORD", "envpw")]);
    assert_eq!(s.targets[1].password.as_deref(), Some("envpw"));
    let s = settings(&format!("{dsn} password=dsnpw"), &[("PGPASSWORD", "envpw")]);
    assert_eq!(s.targets[0].password.as_deref(), Some("dsnpw"));
    // PGPASSFILE is the fallback for passfile.
    let s = settings(
        "host=h2 user=u dbname=d",
        &[("PGPASSFILE", passfile.to_str().unwrap())],
    );
    assert_eq!(s.targets[0].password.as_deref(), Some("h2pw"));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn target_session_attrs_values() {
    use super::dsn::TargetSessionAttrs as T;
    for (text, want) in [
        ("any", T::Any),
        ("read-write", T::ReadWrite),
        ("read-only", T::ReadOnly),
        ("primary", T::Primary),
        ("standby", T::Standby),
        ("prefer-standby", T::PreferStandby),
    ] {
        let params = ConnParams::parse(&format!("target_session_attrs={text}")).unwrap();
        assert_eq!(params.target_session_attrs, Some(want), "{text}");
    }
    let err = ConnParams::parse("target_session_attrs=writable")
        .unwrap_err()
        .to_string();
    assert!(err.contains("expected any, read-write"), "{err}");
    assert_eq!(settings("host=a,b", &[]).target_session_attrs, T::Any);
    let from_env = settings("host=a,b", &[("PGTARGETSESSIONATTRS", "primary")]);
    assert_eq!(from_env.target_session_attrs, T::Primary);
    let uri = ConnParams::parse("postgresql://a:1,b:2/db?target_session_attrs=read-write").unwrap();
    assert_eq!(uri.target_session_attrs, Some(T::ReadWrite));
}
