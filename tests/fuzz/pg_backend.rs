//! Backend messages as the client reads them: their framing, every body parser, and the
//! replication stream's CopyData fed on to the decoder.

use std::io::Write;
use std::net::Shutdown;

use pgwire_cdc::pg::fuzzing;
use pgwire_cdc::pg::{PgError, ReplicationMessage, ServerError};
use pgwire_cdc::sink::NullSink;
use pgwire_cdc::snapshot::frame::SIGNATURE;
use pgwire_cdc::{Decoder, DecoderConfig, FeedError};
use proptest::prelude::*;

use crate::common;
use crate::harness::{apply, mutations, run, seed_messages};
use crate::pg_wire::{
    auth_request, check_pg_error, cstrs, data_row_body, error_body, keepalive, message_stream,
    reference_frames, row_description, socket_pair, xlogdata, Tail, LOGIN_REFUSED, SERVER_ERROR,
};

/// Backend messages as PostgreSQL 15-18 send them to this client (start-up, simple
/// queries, COPY, replication), and the pgoutput messages of the captures as XLogData.
fn backend_seeds() -> Vec<(u8, Vec<u8>)> {
    let mut seeds = vec![
        (b'R', auth_request(0, b"")),
        (
            b'S',
            cstrs(&["server_version", "15.4 (Debian 15.4-1.pgdg120+1)"]),
        ),
        (b'S', cstrs(&["server_version", "18beta1"])),
        (b'S', cstrs(&["client_encoding", "UTF8"])),
        (b'S', cstrs(&["DateStyle", "ISO, MDY"])),
        (b'S', cstrs(&["integer_datetimes", "on"])),
        (b'S', cstrs(&["TimeZone", "Etc/UTC"])),
        (b'S', cstrs(&["application_name", ""])),
        (b'K', [&4711i32.to_be_bytes()[..], &[1, 2, 3, 4]].concat()),
        (b'K', [&4711i32.to_be_bytes()[..], &[7; 32]].concat()),
        (b'Z', b"I".to_vec()),
        (b'Z', b"T".to_vec()),
        (b'Z', b"E".to_vec()),
        (
            b'T',
            row_description(&["systemid", "timeline", "xlogpos", "dbname"]),
        ),
        (
            b'D',
            data_row_body(&[
                Some("7294052135412345678"),
                Some("1"),
                Some("0/16B3748"),
                Some("postgres"),
            ]),
        ),
        (
            b'D',
            data_row_body(&[Some("s"), Some("0/1A2B3C8"), None, Some("pgoutput")]),
        ),
        (b'D', data_row_body::<&str>(&[])),
        (b'C', cstrs(&["IDENTIFY_SYSTEM"])),
        (b'C', cstrs(&["COPY 42"])),
        (b'C', cstrs(&["INSERT 0 5"])),
        (b'C', cstrs(&["SELECT 1"])),
        (b'C', cstrs(&["CREATE_REPLICATION_SLOT"])),
        (b'E', error_body(SERVER_ERROR)),
        (b'E', error_body(LOGIN_REFUSED)),
        (
            b'N',
            error_body(&[
                (b'S', "WARNUNG"),
                (b'V', "WARNING"),
                (b'C', "01000"),
                (b'M', "wal_level is insufficient"),
            ]),
        ),
        (b'W', vec![0, 0, 0]),
        (b'H', vec![1, 0, 2, 0, 1, 0, 1]),
        (b'G', vec![0, 0, 1, 0, 0]),
        (b'd', [&SIGNATURE[..], &[0; 8]].concat()),
        (b'd', keepalive(0x016B_3748, 742_000_000_000, false)),
        (b'd', keepalive(0x016B_3748, 742_000_000_000, true)),
        (b'c', Vec::new()),
        (b'I', Vec::new()),
        (
            b'A',
            [&4711i32.to_be_bytes()[..], &cstrs(&["channel", "payload"])].concat(),
        ),
        (
            b'v',
            [
                &0i32.to_be_bytes()[..],
                &1i32.to_be_bytes(),
                &cstrs(&["_pq_.x"]),
            ]
            .concat(),
        ),
    ];
    // A sample of the captures' messages, as the XLogData that carries them.
    let messages = seed_messages();
    let step = (messages.len() / 64).max(1);
    for (i, m) in messages.iter().step_by(step).enumerate() {
        let lsn = 0x1_0000_0000 + i as u64 * 0x100;
        seeds.push((b'd', xlogdata(lsn, lsn + 0x80, 742_000_000_000, m)));
    }
    seeds
}

#[test]
fn fuzz_backend_frames() {
    let seeds = backend_seeds();
    let strategy = (
        proptest::collection::vec((0..seeds.len(), proptest::option::of(mutations())), 0..24),
        proptest::option::of(mutations()),
        proptest::collection::vec(any::<prop::sample::Index>(), 0..8),
    );
    run(
        "backend_frames",
        1_000,
        strategy,
        |(picks, stream_muts, cuts)| {
            let stream = message_stream(&seeds, &picks, stream_muts.as_deref());
            let mut points: Vec<usize> = cuts.iter().map(|c| c.index(stream.len() + 1)).collect();
            points.sort_unstable();

            // Each piece is written, then everything complete so far is read without waiting;
            // at the end the peer closes and the rest is read.
            let (ours, mut peer) = socket_pair();
            let mut frames = fuzzing::Frames::new(ours).unwrap();
            let mut got = Vec::new();
            let mut error = None;
            let mut start = 0;
            'pieces: for p in points.into_iter().chain([stream.len()]) {
                peer.write_all(&stream[start..p]).unwrap();
                start = p;
                loop {
                    match frames.poll() {
                        Ok(Some((tag, body))) => got.push((tag, body.to_vec())),
                        Ok(None) => break,
                        Err(e) => {
                            error = Some(e);
                            break 'pieces;
                        }
                    }
                }
            }
            peer.shutdown(Shutdown::Write).unwrap();
            let error = match error {
                Some(e) => e,
                None => loop {
                    match frames.wait() {
                        Ok((tag, body)) => got.push((tag, body.to_vec())),
                        Err(e) => break e,
                    }
                },
            };
            let (expected, tail) = reference_frames(&stream);
            prop_assert_eq!(got, expected);
            match tail {
                Tail::BadLength => prop_assert!(matches!(error, PgError::Protocol(_)), "{error:?}"),
                Tail::Clean | Tail::Partial => {
                    prop_assert!(matches!(error, PgError::Connect { .. }), "{error:?}");
                    prop_assert!(error.to_string().contains("closed"), "{error}");
                }
            }
            Ok(())
        },
    );
}

/// Every body parser on one body; whatever parses must encode back to what was read.
fn check_backend_body(body: &[u8]) -> Result<(), TestCaseError> {
    if let Ok(e) = fuzzing::error_fields(body) {
        let mut fields = Vec::new();
        for (code, value) in [
            (b'V', Some(&e.severity)),
            (b'C', Some(&e.sqlstate)),
            (b'M', Some(&e.message)),
            (b'D', e.detail.as_ref()),
            (b'H', e.hint.as_ref()),
        ] {
            if let Some(v) = value {
                fields.push((code, v.as_str()));
            }
        }
        let again = fuzzing::error_fields(&error_body(&fields)).unwrap();
        prop_assert_eq!(&again, &e);
        // DETAIL can hold row values: never displayed.
        let display = PgError::Server(Box::new(ServerError {
            detail: None,
            ..e.clone()
        }))
        .to_string();
        prop_assert_eq!(PgError::Server(Box::new(e)).to_string(), display);
    }
    if let Ok((name, value)) = fuzzing::parameter_status(body) {
        let encoded = cstrs(&[&name, &value]);
        if std::str::from_utf8(body).is_ok() {
            prop_assert_eq!(&encoded[..], body);
        }
        prop_assert_eq!(fuzzing::parameter_status(&encoded).unwrap(), (name, value));
    }
    if let Ok(tag) = fuzzing::command_tag(body) {
        if std::str::from_utf8(body).is_ok() {
            prop_assert_eq!(&cstrs(&[&tag])[..], body);
        }
        if let Some(n) = fuzzing::tag_row_count(&tag) {
            prop_assert!(tag.trim_end_matches(|c: char| c.is_ascii_digit()).len() < tag.len());
            prop_assert!(n.to_string().len() <= tag.len());
        }
    }
    if let Ok(row) = fuzzing::data_row(body) {
        prop_assert_eq!(&data_row_body(&row)[..], body);
    }
    if let Ok((pid, key)) = fuzzing::backend_key_data(body) {
        prop_assert_eq!(&[&pid.to_be_bytes()[..], &key].concat()[..], body);
    }
    if let Ok(status) = fuzzing::ready_for_query(body) {
        prop_assert_eq!(&[status][..], body);
    }
    match fuzzing::replication_message(body) {
        Ok(ReplicationMessage::XLogData {
            wal_start,
            wal_end,
            server_clock,
            data,
        }) => {
            prop_assert_eq!(&xlogdata(wal_start, wal_end, server_clock, data)[..], body);
        }
        Ok(ReplicationMessage::Keepalive {
            wal_end,
            server_clock,
            reply_requested,
        }) => {
            prop_assert_eq!(body.len(), 18);
            prop_assert_eq!(
                &keepalive(wal_end, server_clock, reply_requested)[..17],
                &body[..17]
            );
            prop_assert_eq!(reply_requested, body[17] != 0);
        }
        Err(e) => check_pg_error(&e)?,
    }
    if let Ok(names) = fuzzing::sasl_mechanisms(body) {
        prop_assert!(names.iter().all(|n| !n.is_empty()));
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let encoded = [cstrs(&refs), vec![0]].concat();
        prop_assert_eq!(fuzzing::sasl_mechanisms(&encoded).unwrap(), names);
    }
    Ok(())
}

/// `server_version` as the client reads it, computed without overflow.
fn expected_version_num(text: &str) -> Option<u64> {
    let version = text.split_whitespace().next()?;
    let mut numbers = version.split('.').map(|part| {
        let digits: String = part.chars().take_while(char::is_ascii_digit).collect();
        digits.parse::<u32>().ok().map(u64::from)
    });
    let major = numbers.next()??;
    let second = numbers.next().flatten().unwrap_or(0);
    if major >= 10 {
        Some(major * 10_000 + second)
    } else {
        let third = numbers.next().flatten().unwrap_or(0);
        Some(major * 10_000 + second * 100 + third)
    }
}

#[test]
fn fuzz_backend_messages() {
    let seeds = backend_seeds();
    let body = prop_oneof![
        (0..seeds.len(), proptest::option::weighted(0.8, mutations())).prop_map(move |(i, m)| {
            match m {
                Some(m) => apply(seeds[i].1.clone(), &m),
                None => seeds[i].1.clone(),
            }
        }),
        proptest::collection::vec(any::<u8>(), 0..64),
    ];
    let version = prop_oneof![
        (9u32..=99, 0u32..=99, 0u32..=99).prop_map(|(a, b, c)| format!("{a}.{b}.{c}")),
        (10u32..=99, 0u32..=9).prop_map(|(a, b)| format!("{a}.{b} (Debian {a}.{b}-1.pgdg120+1)")),
        (10u32..=99).prop_map(|a| format!("{a}beta2")),
        "[0-9]{0,12}(\\.[0-9]{0,12}){0,3}[a-z0-9 ()+.-]{0,8}",
        "\\PC{0,16}",
    ];
    run(
        "backend_messages",
        2_000,
        (body, version),
        |(body, version)| {
            check_backend_body(&body)?;
            let num = fuzzing::server_version_num(&version);
            if let Some(n) = num {
                prop_assert_eq!(Some(u64::from(n)), expected_version_num(&version));
            } else if let Some(expected) = expected_version_num(&version) {
                // Only a number too large for server_version_num may be refused.
                prop_assert!(expected > u64::from(u32::MAX), "{version:?}: {expected}");
            }
            Ok(())
        },
    );
}

/// The captures as the replication stream carries them: each message in an XLogData, a
/// keepalive every few messages; one CopyData mutated. Parsed as the session parses them
/// and the XLogData payloads fed to the decoder.
#[test]
fn fuzz_replication_copy_data() {
    let captures = common::captures();
    let strategy = (
        0..captures.len(),
        any::<usize>(),
        mutations(),
        1usize..8,
        any::<u64>(),
    );
    run(
        "replication_copy_data",
        2_000,
        strategy,
        |(c, at, muts, every, base)| {
            let cap = &captures[c];
            let mut bodies = Vec::new();
            for (i, (lsn, bytes)) in cap.messages.iter().enumerate() {
                let clock = 742_000_000_000 + i as i64;
                bodies.push(xlogdata(*lsn, lsn.wrapping_add(base % 4096), clock, bytes));
                if i % every == 0 {
                    bodies.push(keepalive(*lsn, clock, i % (2 * every) == 0));
                }
            }
            let target = at % bodies.len();
            bodies[target] = apply(bodies[target].clone(), &muts);
            let mut dec = Decoder::new(DecoderConfig {
                proto_version: cap.proto_version,
                binary: cap.binary,
            });
            let mut sink = NullSink::default();
            for body in &bodies {
                check_backend_body(body)?;
                match fuzzing::replication_message(body) {
                    Ok(ReplicationMessage::XLogData {
                        wal_start, data, ..
                    }) => {
                        prop_assert_eq!(data, &body[25..]);
                        if let Err(FeedError::Decode(e)) = dec.feed(data, wal_start, &mut sink) {
                            prop_assert!(e.offset <= data.len());
                        }
                    }
                    Ok(ReplicationMessage::Keepalive { .. }) => prop_assert_eq!(body.len(), 18),
                    Err(e) => {
                        check_pg_error(&e)?;
                        prop_assert!(!matches!(body.first(), Some(b'w')) || body.len() < 25);
                    }
                }
            }
            Ok(())
        },
    );
}
