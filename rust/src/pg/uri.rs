//! `postgresql://` URIs, split the way libpq's `conninfo_uri_parse_options` does:
//! `[user[:password]@]` up to the first `@` before any `/`, then comma-separated
//! `host[:port]` items (`[v6addr]` in brackets), then `/dbname`, then `?key=value&...`.
//! Each piece is percent-decoded on its own; `%00` and malformed escapes are errors.
//!
//! The parser hands each setting it finds, as a libpq keyword and its decoded value, to
//! the caller's `set` in the order the URI gives them (`dsn.rs` stores them in a
//! `ConnParams`); this module knows only keywords, not where they go.

use super::error::PgError;

/// Parses what follows `postgresql://`, passing every setting to `set` as soon as it is
/// decoded (so an error of `set` comes before any error later in the URI).
pub(crate) fn parse_uri(
    rest: &str,
    set: &mut dyn FnMut(&str, String) -> Result<(), PgError>,
) -> Result<(), PgError> {
    let mut p = rest;

    // Credentials: only if an '@' comes before the first '/'.
    let head_end = p.find('/').unwrap_or(p.len());
    if let Some(at) = p.get(..head_end).and_then(|head| head.find('@')) {
        let userinfo = p.get(..at).unwrap_or_default();
        let (user, password) = match userinfo.split_once(':') {
            Some((u, pw)) => (u, Some(pw)),
            None => (userinfo, None),
        };
        set("user", decode(user, "user name")?)?;
        if let Some(pw) = password {
            set("password", decode(pw, "password")?)?;
        }
        p = p.get(at + 1..).unwrap_or_default();
    }

    // Hosts and ports, as two parallel comma-separated lists.
    let mut hosts: Vec<String> = Vec::new();
    let mut ports: Vec<String> = Vec::new();
    let terminator = loop {
        let host;
        if let Some(after) = p.strip_prefix('[') {
            let close = after.find(']').ok_or_else(|| {
                PgError::config("end of string reached when looking for \"]\" in an IPv6 host address in the URI")
            })?;
            if close == 0 {
                return Err(PgError::config(
                    "IPv6 host address may not be empty in the URI",
                ));
            }
            host = after.get(..close).unwrap_or_default();
            p = after.get(close + 1..).unwrap_or_default();
            if let Some(c) = p.chars().next() {
                if !matches!(c, ':' | '/' | '?' | ',') {
                    return Err(PgError::config(format!(
                        "unexpected character \"{c}\" after an IPv6 host address in the URI \
                         (expected \":\", \"/\", \"?\" or \",\")"
                    )));
                }
            }
        } else {
            let end = p.find([':', '/', '?', ',']).unwrap_or(p.len());
            host = p.get(..end).unwrap_or_default();
            p = p.get(end..).unwrap_or_default();
        }
        hosts.push(decode(host, "host")?);
        let mut port = "";
        if let Some(after) = p.strip_prefix(':') {
            let end = after.find(['/', '?', ',']).unwrap_or(after.len());
            port = after.get(..end).unwrap_or_default();
            p = after.get(end..).unwrap_or_default();
        }
        ports.push(decode(port, "port")?);
        match p.chars().next() {
            Some(',') => p = p.get(1..).unwrap_or_default(),
            other => break other,
        }
    };
    if hosts.iter().any(|h| !h.is_empty()) {
        set("host", hosts.join(","))?;
    }
    if ports.iter().any(|port| !port.is_empty()) {
        set("port", ports.join(","))?;
    }

    // Database name: from '/' up to '?'.
    let mut query = None;
    match terminator {
        Some('/') => {
            let after = p.get(1..).unwrap_or_default();
            let (db, q) = match after.split_once('?') {
                Some((db, q)) => (db, Some(q)),
                None => (after, None),
            };
            if !db.is_empty() {
                set("dbname", decode(db, "database name")?)?;
            }
            query = q;
        }
        Some('?') => query = p.get(1..),
        _ => {}
    }

    if let Some(query) = query {
        for item in query.split('&').filter(|item| !item.is_empty()) {
            let (key, value) = item.split_once('=').ok_or_else(|| {
                PgError::config("missing key/value separator \"=\" in a URI query parameter")
            })?;
            if value.contains('=') {
                return Err(PgError::config(
                    "extra key/value separator \"=\" in a URI query parameter",
                ));
            }
            let key = decode(key, "query parameter name")?;
            let value = decode(value, "query parameter value")?;
            set(&key, value)?;
        }
    }
    Ok(())
}

/// Percent-decoding as libpq does it: `%XX` only (no `+` for space), `%00` refused, and
/// the result must be UTF-8. `what` names the URI part for the error (never its text).
pub(crate) fn decode(text: &str, what: &str) -> Result<String, PgError> {
    if !text.contains('%') {
        return Ok(text.to_owned());
    }
    let bad = || PgError::config(format!("invalid percent-encoded token in the URI {what}"));
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if b == b'%' {
            let hex = bytes.get(i + 1..i + 3).ok_or_else(bad)?;
            let hex = std::str::from_utf8(hex).map_err(|_| bad())?;
            let value = u8::from_str_radix(hex, 16).map_err(|_| bad())?;
            if value == 0 {
                return Err(PgError::config(format!(
                    "forbidden value %00 in the URI {what}"
                )));
            }
            out.push(value);
            i += 3;
        } else {
            out.push(b);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| {
        PgError::config(format!(
            "the URI {what} is not UTF-8 after percent-decoding"
        ))
    })
}
