//! The PostgreSQL client's targets (`pg_backend.rs`, `pg_session.rs`, `pg_auth.rs`,
//! `pg_config.rs`) reach its crate-private parsers through `pgwire_cdc::pg::fuzzing`. What
//! they share: backend messages written as the protocol defines them, the protocol's
//! framing of a byte stream, and the check every client error must pass.

use std::os::unix::net::UnixStream;

use pgwire_cdc::pg::PgError;
use proptest::prelude::*;

use crate::harness::{apply, Mutation};

pub(crate) fn cstrs(parts: &[&str]) -> Vec<u8> {
    parts.iter().flat_map(|p| p.bytes().chain([0])).collect()
}

pub(crate) fn framed(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    out.extend((body.len() as i32 + 4).to_be_bytes());
    out.extend(body);
    out
}

pub(crate) fn xlogdata(start: u64, end: u64, clock: i64, data: &[u8]) -> Vec<u8> {
    let mut out = vec![b'w'];
    out.extend(start.to_be_bytes());
    out.extend(end.to_be_bytes());
    out.extend(clock.to_be_bytes());
    out.extend(data);
    out
}

pub(crate) fn keepalive(end: u64, clock: i64, reply: bool) -> Vec<u8> {
    let mut out = vec![b'k'];
    out.extend(end.to_be_bytes());
    out.extend(clock.to_be_bytes());
    out.push(u8::from(reply));
    out
}

pub(crate) fn data_row_body<S: AsRef<[u8]>>(row: &[Option<S>]) -> Vec<u8> {
    let mut out = (row.len() as i16).to_be_bytes().to_vec();
    for value in row {
        match value {
            None => out.extend((-1i32).to_be_bytes()),
            Some(v) => {
                out.extend((v.as_ref().len() as i32).to_be_bytes());
                out.extend(v.as_ref());
            }
        }
    }
    out
}

pub(crate) fn row_description(names: &[&str]) -> Vec<u8> {
    let mut out = (names.len() as i16).to_be_bytes().to_vec();
    for name in names {
        out.extend(cstrs(&[name]));
        out.extend(0i32.to_be_bytes()); // table
        out.extend(0i16.to_be_bytes()); // column number
        out.extend(25i32.to_be_bytes()); // type: text
        out.extend((-1i16).to_be_bytes()); // type length
        out.extend((-1i32).to_be_bytes()); // type modifier
        out.extend(0i16.to_be_bytes()); // text format
    }
    out
}

pub(crate) fn error_body(fields: &[(u8, &str)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (code, value) in fields {
        out.push(*code);
        out.extend(cstrs(&[value]));
    }
    out.push(0);
    out
}

pub(crate) fn auth_request(code: i32, data: &[u8]) -> Vec<u8> {
    let mut out = code.to_be_bytes().to_vec();
    out.extend(data);
    out
}

pub(crate) const SERVER_ERROR: &[(u8, &str)] = &[
    (b'S', "ERROR"),
    (b'V', "ERROR"),
    (b'C', "42704"),
    (b'M', "replication slot \"s\" does not exist"),
    (b'D', "Key (id)=(1) already exists."),
    (b'H', "Create it with CREATE_REPLICATION_SLOT."),
    (b'F', "slot.c"),
    (b'L', "512"),
    (b'R', "ReplicationSlotAcquire"),
];

pub(crate) const LOGIN_REFUSED: &[(u8, &str)] = &[
    (b'S', "FATAL"),
    (b'V', "FATAL"),
    (b'C', "28P01"),
    (b'M', "password authentication failed for user \"app\""),
];

pub(crate) fn socket_pair() -> (UnixStream, UnixStream) {
    UnixStream::pair().unwrap()
}

/// How a byte stream splits into backend messages, as the protocol defines it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tail {
    /// Nothing left over.
    Clean,
    /// An incomplete message at the end.
    Partial,
    /// A length below 4 or above 1 GiB, which the client refuses.
    BadLength,
}

pub(crate) fn reference_frames(stream: &[u8]) -> (Vec<(u8, Vec<u8>)>, Tail) {
    let mut out = Vec::new();
    let mut rest = stream;
    loop {
        if rest.is_empty() {
            return (out, Tail::Clean);
        }
        if rest.len() < 5 {
            return (out, Tail::Partial);
        }
        let len = i32::from_be_bytes(rest[1..5].try_into().unwrap());
        if !(4..=1 << 30).contains(&len) {
            return (out, Tail::BadLength);
        }
        let total = len as usize + 1;
        if rest.len() < total {
            return (out, Tail::Partial);
        }
        out.push((rest[0], rest[5..total].to_vec()));
        rest = &rest[total..];
    }
}

/// A client error must be one that says what went wrong, never a stalled read.
pub(crate) fn check_pg_error(e: &PgError) -> Result<(), TestCaseError> {
    let text = e.to_string();
    prop_assert!(!text.contains("timed out"), "stalled: {text}");
    Ok(())
}

/// Seed messages (each body mutated or not), framed; then the whole stream mutated.
pub(crate) fn message_stream(
    seeds: &[(u8, Vec<u8>)],
    picks: &[(usize, Option<Vec<Mutation>>)],
    stream_muts: Option<&[Mutation]>,
) -> Vec<u8> {
    let mut stream = Vec::new();
    for (i, muts) in picks {
        let (tag, body) = &seeds[*i];
        let body = match muts {
            Some(m) => apply(body.clone(), m),
            None => body.clone(),
        };
        stream.extend(framed(*tag, &body));
    }
    match stream_muts {
        Some(m) => apply(stream, m),
        None => stream,
    }
}
