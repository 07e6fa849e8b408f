//! Connection strings (keyword/value and URIs), their resolution to targets, the password
//! file, and URI percent-decoding.

use pgwire_cdc::pg::fuzzing;
use pgwire_cdc::pg::{ChannelBindingMode, ConnParams, PgError, SslMode};
use proptest::prelude::*;

use crate::harness::{apply, mutations, run, Mutation};

/// `key='value'` with `\` and `'` escaped.
fn quoted(value: &str) -> String {
    format!("'{}'", value.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// Unquoted, with a backslash before white space, quotes and backslashes.
fn escaped(value: &str) -> String {
    let mut out = String::new();
    for c in value.chars() {
        if c.is_whitespace() || c == '\\' || c == '\'' {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The keyword/value string of what `params` holds.
fn to_keyword_value(params: &ConnParams) -> String {
    let sslmode = params.sslmode.map(|m| {
        match m {
            SslMode::Disable => "disable",
            SslMode::Allow => "allow",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
        .to_owned()
    });
    let channel_binding = params.channel_binding.map(|m| {
        match m {
            ChannelBindingMode::Disable => "disable",
            ChannelBindingMode::Prefer => "prefer",
            ChannelBindingMode::Require => "require",
        }
        .to_owned()
    });
    let pairs = [
        ("host", &params.host),
        ("hostaddr", &params.hostaddr),
        ("port", &params.port),
        ("user", &params.user),
        ("password", &params.password),
        ("dbname", &params.dbname),
        ("sslmode", &sslmode),
        ("sslrootcert", &params.sslrootcert),
        ("application_name", &params.application_name),
        (
            "fallback_application_name",
            &params.fallback_application_name,
        ),
        ("connect_timeout", &params.connect_timeout),
        ("options", &params.options),
        ("channel_binding", &channel_binding),
        ("passfile", &params.passfile),
    ];
    pairs
        .iter()
        .filter_map(|(key, value)| value.as_ref().map(|v| format!("{key}={}", quoted(v))))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `ConnParams::set` applied in order: what a string of these pairs must parse to.
fn set_all<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<ConnParams, PgError> {
    let mut params = ConnParams::default();
    for (key, value) in pairs {
        params.set(key, value.to_owned())?;
    }
    Ok(params)
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

#[derive(Debug, Clone)]
enum UriHost {
    Name(String),
    /// Written in brackets.
    V6(String),
    /// A socket directory, percent-encoded.
    Path(String),
}

/// The parts of a generated URI.
#[derive(Debug, Clone)]
struct UriCase {
    short_scheme: bool,
    user: Option<String>,
    password: Option<String>,
    hosts: Vec<(UriHost, Option<String>)>,
    dbname: Option<String>,
    query: Vec<(String, String)>,
}

#[derive(Debug, Clone)]
enum DsnCase {
    KeywordValue(Vec<(String, String, bool)>),
    Uri(UriCase),
    Mutated(usize, Vec<Mutation>),
    Arbitrary(String),
}

const DSN_SEEDS: &[&str] = &[
    "host=db.example.com port=5432 user=app password='s3cr3t pw' dbname=orders sslmode=verify-full sslrootcert=~/.postgresql/root.crt",
    "postgresql://app:s3cr3t@db1.example.com:5432,db2.example.com:5433/orders?sslmode=require&application_name=cdc&connect_timeout=10",
    "postgres://[::1]:5432/db?host=/var/run/postgresql",
    "postgresql://%2Fvar%2Frun%2Fpostgresql/db?user=u&ssl=true",
    "user=u options='-c search_path=a\\,b -c x=1' application_name = cdc",
    "host=a,b hostaddr=10.0.0.1,::1 port=5432,5433 channel_binding=require connect_timeout=1",
    "host=/tmp port=5433 passfile=~/.pgpass fallback_application_name=x",
    "postgresql://u@/db",
    "postgresql://",
    "",
];

fn dsn_values() -> impl Strategy<Value = String> {
    prop_oneof![
        "\\PC{0,12}",
        "[ '\\\\=a-z]{0,8}",
        prop::sample::select(vec![
            "disable".to_owned(),
            "prefer".to_owned(),
            "require".to_owned(),
            "verify-full".to_owned(),
            "5432".to_owned(),
            "true".to_owned(),
            String::new(),
        ]),
    ]
}

fn dsn_cases() -> impl Strategy<Value = DsnCase> {
    let keys = prop_oneof![
        8 => prop::sample::select(fuzzing::KEYWORDS.to_vec()).prop_map(str::to_owned),
        1 => prop::sample::select(vec!["replication", "sslcert", "service"]).prop_map(str::to_owned),
        1 => "[a-z_]{1,10}",
    ];
    let query_keys = prop::sample::select(fuzzing::KEYWORDS.to_vec()).prop_map(str::to_owned);
    let host = prop_oneof![
        "[a-z0-9.-]{0,10}".prop_map(UriHost::Name),
        "[0-9a-f:]{1,12}".prop_map(UriHost::V6),
        "/[a-z/]{0,10}".prop_map(UriHost::Path),
    ];
    let port = proptest::option::of("[0-9]{0,5}");
    prop_oneof![
        proptest::collection::vec((keys, dsn_values(), any::<bool>()), 0..6)
            .prop_map(DsnCase::KeywordValue),
        (
            any::<bool>(),
            proptest::option::of("\\PC{0,8}"),
            proptest::option::of("\\PC{0,8}"),
            proptest::collection::vec((host, port), 0..4),
            proptest::option::of("\\PC{0,8}"),
            proptest::collection::vec((query_keys, dsn_values()), 0..4),
        )
            .prop_map(|(short_scheme, user, password, hosts, dbname, query)| {
                DsnCase::Uri(UriCase {
                    short_scheme,
                    user,
                    password,
                    hosts,
                    dbname,
                    query,
                })
            }),
        (0..DSN_SEEDS.len(), mutations()).prop_map(|(i, m)| DsnCase::Mutated(i, m)),
        "\\PC{0,40}".prop_map(DsnCase::Arbitrary),
    ]
}

/// The string of a case and, for generated ones, what it must parse to.
type DsnExpectation = Option<Result<ConnParams, PgError>>;

fn dsn_text(case: &DsnCase) -> (String, DsnExpectation) {
    match case {
        DsnCase::KeywordValue(pairs) => {
            let text = pairs
                .iter()
                .map(|(k, v, quote)| {
                    // An empty value must be quoted: `key= next=1` gives `key` "next=1".
                    let value = if *quote || v.is_empty() {
                        quoted(v)
                    } else {
                        escaped(v)
                    };
                    format!("{k}={value}")
                })
                .collect::<Vec<_>>()
                .join(" ");
            let expected = set_all(pairs.iter().map(|(k, v, _)| (k.as_str(), v.as_str())));
            (text, Some(expected))
        }
        DsnCase::Uri(uri) => {
            let UriCase {
                short_scheme,
                user,
                password,
                hosts,
                dbname,
                query,
            } = uri;
            let mut text = String::from(if *short_scheme {
                "postgres://"
            } else {
                "postgresql://"
            });
            let mut pairs: Vec<(&str, String)> = Vec::new();
            if user.is_some() || password.is_some() {
                let u = user.as_deref().unwrap_or_default();
                text.push_str(&percent_encode(u));
                pairs.push(("user", u.to_owned()));
                if let Some(pw) = password {
                    text.push(':');
                    text.push_str(&percent_encode(pw));
                    pairs.push(("password", pw.clone()));
                }
                text.push('@');
            }
            let mut names = Vec::new();
            let mut ports = Vec::new();
            let items: Vec<String> = hosts
                .iter()
                .map(|(host, port)| {
                    let (written, name) = match host {
                        UriHost::Name(n) => (percent_encode(n), n.clone()),
                        UriHost::V6(a) => (format!("[{a}]"), a.clone()),
                        UriHost::Path(p) => (percent_encode(p), p.clone()),
                    };
                    names.push(name);
                    ports.push(port.clone().unwrap_or_default());
                    match port {
                        Some(p) => format!("{written}:{p}"),
                        None => written,
                    }
                })
                .collect();
            text.push_str(&items.join(","));
            if names.iter().any(|n| !n.is_empty()) {
                pairs.push(("host", names.join(",")));
            }
            if ports.iter().any(|p| !p.is_empty()) {
                pairs.push(("port", ports.join(",")));
            }
            if dbname.is_some() || !query.is_empty() {
                text.push('/');
                let db = dbname.as_deref().unwrap_or_default();
                text.push_str(&percent_encode(db));
                if !db.is_empty() {
                    pairs.push(("dbname", db.to_owned()));
                }
            }
            if !query.is_empty() {
                text.push('?');
                let items: Vec<String> = query
                    .iter()
                    .map(|(k, v)| format!("{}={}", percent_encode(k), percent_encode(v)))
                    .collect();
                text.push_str(&items.join("&"));
                pairs.extend(query.iter().map(|(k, v)| (k.as_str(), v.clone())));
            }
            let expected = set_all(pairs.iter().map(|(k, v)| (*k, v.as_str())));
            (text, Some(expected))
        }
        DsnCase::Mutated(i, muts) => {
            let bytes = apply(DSN_SEEDS[*i].as_bytes().to_vec(), muts);
            (String::from_utf8_lossy(&bytes).into_owned(), None)
        }
        DsnCase::Arbitrary(text) => (text.clone(), None),
    }
}

#[test]
fn fuzz_connection_strings() {
    let strategy = (dsn_cases(), any::<bool>());
    run(
        "connection_strings",
        2_000,
        strategy,
        |(case, pgpassword)| {
            let (text, expected) = dsn_text(&case);
            let parsed = ConnParams::parse(&text);
            if let DsnCase::KeywordValue(pairs) = &case {
                let split = fuzzing::keyword_value(&text).unwrap();
                let written: Vec<(String, String)> = pairs
                    .iter()
                    .map(|(k, v, _)| (k.clone(), v.clone()))
                    .collect();
                prop_assert_eq!(split, written);
            }
            if let Some(expected) = expected {
                match (&parsed, &expected) {
                    (Ok(p), Ok(e)) => prop_assert_eq!(p, e),
                    (Err(_), Err(_)) => {}
                    _ => prop_assert!(false, "{text:?}: {parsed:?}, expected {expected:?}"),
                }
            }
            let params = match parsed {
                Ok(params) => params,
                Err(e) => {
                    prop_assert!(matches!(e, PgError::Config(_)), "{e:?}");
                    return Ok(());
                }
            };
            // What parsed says the same written as keyword/value.
            let again = ConnParams::parse(&to_keyword_value(&params));
            prop_assert_eq!(again.as_ref().ok(), Some(&params), "{:?}", again);

            // Resolution: one target per host (or address), none without a port. With a
            // password given, no password file is read.
            let mut env = fuzzing::Environment {
                os_user: Some("fuzz".to_owned()),
                ..Default::default()
            };
            if pgpassword || params.password.is_none() {
                env.vars.insert("PGPASSWORD".to_owned(), "pw".to_owned());
            }
            if let Ok(settings) = fuzzing::resolve(&params, &env) {
                let count =
                    |list: &Option<String>| list.as_ref().map_or(0, |l| l.split(',').count());
                let targets = count(&params.host).max(count(&params.hostaddr)).max(1);
                prop_assert_eq!(settings.targets.len(), targets);
                for target in &settings.targets {
                    prop_assert!(target.port != 0);
                    prop_assert!(target.password.is_some());
                    if let fuzzing::TargetAddr::Unix(path) = &target.addr {
                        let file = format!(".s.PGSQL.{}", target.port);
                        prop_assert!(path.ends_with(&file), "{path:?}");
                    }
                }
            }
            Ok(())
        },
    );
}

/// A password file line: fields escaped (`\:`, `\\`), a bare `*` where `wild`.
fn pgpass_line(fields: &[(String, bool); 5]) -> String {
    fields
        .iter()
        .map(|(text, wild)| {
            if *wild {
                "*".to_owned()
            } else if text == "*" {
                // A literal star.
                "\\*".to_owned()
            } else {
                text.replace('\\', "\\\\").replace(':', "\\:")
            }
        })
        .collect::<Vec<_>>()
        .join(":")
}

#[derive(Debug, Clone)]
enum PassCase {
    /// Lines (fields, wildcard flags; or a comment) and the key looked up.
    Lines(Vec<Option<[(String, bool); 5]>>, [String; 4]),
    Mutated(Vec<Mutation>, [String; 4]),
}

#[test]
fn fuzz_pgpass() {
    let field = || {
        (
            prop_oneof![
                prop::sample::select(vec!["db", "localhost", "5432", "app", "*", ""])
                    .prop_map(str::to_owned),
                "[a-z:\\\\*#]{0,6}",
                "[^\\r\\n]{0,6}",
            ],
            proptest::bool::weighted(0.2),
        )
    };
    let line = proptest::option::weighted(0.9, [field(), field(), field(), field(), field()]);
    let key = || {
        prop::sample::select(vec!["db", "localhost", "5432", "app", "*", "a:b", ""])
            .prop_map(str::to_owned)
    };
    let keys = [key(), key(), key(), key()];
    let strategy = prop_oneof![
        (proptest::collection::vec(line, 0..6), keys.clone())
            .prop_map(|(lines, key)| PassCase::Lines(lines, key)),
        (mutations(), keys).prop_map(|(m, key)| PassCase::Mutated(m, key)),
    ];
    run("pgpass", 2_000, strategy, |case| {
        let (text, key, expected) = match &case {
            PassCase::Lines(lines, key) => {
                let mut text = String::new();
                let mut expected = None;
                for line in lines {
                    let written = match line {
                        Some(fields) => pgpass_line(fields),
                        None => "# a comment: with:five:fields:here".to_owned(),
                    };
                    text.push_str(&written);
                    text.push('\n');
                    let Some(fields) = line else { continue };
                    // A line is a comment when it starts with '#', even an escaped one.
                    if expected.is_some() || written.starts_with('#') {
                        continue;
                    }
                    let matches = fields[..4]
                        .iter()
                        .zip(key)
                        .all(|((text, wild), k)| *wild || text == k);
                    if matches {
                        expected = Some(if fields[4].1 {
                            "*".to_owned()
                        } else {
                            fields[4].0.clone()
                        });
                    }
                }
                (text, key, Some(expected))
            }
            PassCase::Mutated(muts, key) => {
                let seed = "# host:port:db:user:password\n\
                            db.example.com:5432:orders:app:s3cr3t\n\
                            *:*:*:app:with\\:colon\\\\and\\*star\n\
                            localhost:*:*:*:pw\r\n";
                let bytes = apply(seed.as_bytes().to_vec(), muts);
                (String::from_utf8_lossy(&bytes).into_owned(), key, None)
            }
        };
        let found = fuzzing::pgpass_find(&text, &key[0], &key[1], &key[2], &key[3]);
        if let Some(expected) = expected {
            prop_assert_eq!(found, expected, "{:?}", text);
        }
        Ok(())
    });
}

/// Percent-decoding undoes percent-encoding; a bad escape or `%00` is an error.
#[test]
fn fuzz_percent_decode() {
    let strategy = prop_oneof!["\\PC{0,16}", "[%0-9a-fA-FgG]{0,12}"];
    run("percent_decode", 2_000, strategy, |text| {
        prop_assert_eq!(
            fuzzing::percent_decode(&percent_encode(&text)).ok(),
            Some(text.clone())
        );
        match fuzzing::percent_decode(&text) {
            Ok(decoded) => {
                if !text.contains('%') {
                    prop_assert_eq!(decoded, text);
                }
            }
            Err(e) => {
                prop_assert!(text.contains('%'));
                prop_assert!(matches!(e, PgError::Config(_)));
            }
        }
        Ok(())
    });
}
