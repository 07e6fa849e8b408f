//! A whole client session (`Connection`) against a scripted server over a socket.

use std::io::Write;
use std::net::Shutdown;
use std::sync::Arc;
use std::time::Duration;

use pgwire_cdc::pg::fuzzing;
use pgwire_cdc::pg::ReplicationMessage;
use proptest::prelude::*;

use crate::harness::{apply, mutations, run, seed_messages, Mutation};
use crate::pg_wire::{
    check_pg_error, cstrs, data_row_body, error_body, framed, keepalive, row_description,
    socket_pair, xlogdata, SERVER_ERROR,
};

/// What the server says after the start-up, in one client session.
#[derive(Debug, Clone)]
enum Session {
    /// A simple query: its rows, or an ErrorResponse.
    Query {
        rows: Vec<Vec<Option<String>>>,
        fails: bool,
    },
    /// `COPY ... TO STDOUT`: its CopyData payloads.
    Copy { chunks: Vec<Vec<u8>> },
    /// START_REPLICATION, then XLogData (a capture message each) and keepalives, then
    /// CopyDone.
    Replication { messages: Vec<Repl> },
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Repl {
    XLogData {
        start: u64,
        end: u64,
        clock: i64,
        data: Vec<u8>,
    },
    Keepalive {
        end: u64,
        clock: i64,
        reply: bool,
    },
}

impl Repl {
    fn of(m: ReplicationMessage<'_>) -> Self {
        match m {
            ReplicationMessage::XLogData {
                wal_start,
                wal_end,
                server_clock,
                data,
            } => Repl::XLogData {
                start: wal_start,
                end: wal_end,
                clock: server_clock,
                data: data.to_vec(),
            },
            ReplicationMessage::Keepalive {
                wal_end,
                server_clock,
                reply_requested,
            } => Repl::Keepalive {
                end: wal_end,
                clock: server_clock,
                reply: reply_requested,
            },
        }
    }

    fn body(&self) -> Vec<u8> {
        match self {
            Repl::XLogData {
                start,
                end,
                clock,
                data,
            } => xlogdata(*start, *end, *clock, data),
            Repl::Keepalive { end, clock, reply } => keepalive(*end, *clock, *reply),
        }
    }
}

/// A change to the server's script: one message's body or tag, a message left out, or
/// the bytes of the whole stream.
#[derive(Debug, Clone)]
enum ScriptMutation {
    Body { at: usize, muts: Vec<Mutation> },
    Tag { at: usize, tag: u8 },
    Drop { at: usize },
    Stream(Vec<Mutation>),
}

fn script_mutations() -> impl Strategy<Value = ScriptMutation> {
    let tags = prop_oneof![
        prop::sample::select(b"RSKZTDCENWHGdcIAv".to_vec()),
        any::<u8>()
    ];
    prop_oneof![
        (any::<usize>(), mutations()).prop_map(|(at, muts)| ScriptMutation::Body { at, muts }),
        (any::<usize>(), tags).prop_map(|(at, tag)| ScriptMutation::Tag { at, tag }),
        any::<usize>().prop_map(|at| ScriptMutation::Drop { at }),
        mutations().prop_map(ScriptMutation::Stream),
    ]
}

/// The script's bytes: each message framed, with the mutation applied.
fn script_bytes(mut script: Vec<(u8, Vec<u8>)>, mutation: Option<&ScriptMutation>) -> Vec<u8> {
    let n = script.len().max(1);
    match mutation {
        Some(ScriptMutation::Body { at, muts }) => {
            if let Some((_, body)) = script.get_mut(at % n) {
                *body = apply(std::mem::take(body), muts);
            }
        }
        Some(ScriptMutation::Tag { at, tag }) => {
            if let Some((t, _)) = script.get_mut(at % n) {
                *t = *tag;
            }
        }
        Some(ScriptMutation::Drop { at }) => {
            if at % n < script.len() {
                script.remove(at % n);
            }
        }
        Some(ScriptMutation::Stream(_)) | None => {}
    }
    let bytes: Vec<u8> = script.iter().flat_map(|(t, b)| framed(*t, b)).collect();
    match mutation {
        Some(ScriptMutation::Stream(muts)) => apply(bytes, muts),
        _ => bytes,
    }
}

fn sessions(seeds: Arc<Vec<Vec<u8>>>) -> impl Strategy<Value = Session> {
    let row = proptest::collection::vec(proptest::option::of("\\PC{0,12}"), 0..5);
    let repl = prop_oneof![
        (any::<u64>(), 0u64..4096, any::<i64>(), 0..seeds.len()).prop_map(
            move |(start, len, clock, i)| Repl::XLogData {
                start,
                end: start.wrapping_add(len),
                clock,
                data: seeds[i].clone(),
            }
        ),
        (any::<u64>(), any::<i64>(), any::<bool>())
            .prop_map(|(end, clock, reply)| Repl::Keepalive { end, clock, reply }),
    ];
    prop_oneof![
        (proptest::collection::vec(row, 0..6), any::<bool>())
            .prop_map(|(rows, fails)| Session::Query { rows, fails }),
        proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 0..8)
            .prop_map(|chunks| Session::Copy { chunks }),
        proptest::collection::vec(repl, 0..12)
            .prop_map(|messages| Session::Replication { messages }),
    ]
}

#[test]
#[allow(
    clippy::too_many_lines,
    reason = "one proptest body: a scripted server session and the checks on what the client did"
)]
fn fuzz_client_session() {
    let strategy = (
        (9u32..=30, 0u32..=30, 0u32..=30),
        any::<i32>(),
        sessions(Arc::new(seed_messages())),
        proptest::option::of(script_mutations()),
    );
    run(
        "client_session",
        500,
        strategy,
        |((major, minor, patch), pid, session, mutation)| {
            let (version, version_num) = if major >= 10 {
                (
                    format!("{major}.{minor} (Debian {major}.{minor}-1.pgdg120+1)"),
                    major * 10_000 + minor,
                )
            } else {
                (
                    format!("{major}.{minor}.{patch}"),
                    major * 10_000 + minor * 100 + patch,
                )
            };
            let mut script = vec![
                (b'S', cstrs(&["server_version", &version])),
                (b'S', cstrs(&["client_encoding", "UTF8"])),
                (b'N', error_body(&[(b'V', "NOTICE"), (b'M', "hello")])),
                (b'K', [&pid.to_be_bytes()[..], &[1, 2, 3, 4]].concat()),
                (b'S', cstrs(&["TimeZone", "UTC"])),
                (b'Z', b"I".to_vec()),
            ];
            match &session {
                Session::Query { rows, fails: true } => {
                    script.push((b'T', row_description(&["a"])));
                    script.extend(rows.iter().map(|r| (b'D', data_row_body(r))));
                    script.push((b'E', error_body(SERVER_ERROR)));
                    script.push((b'Z', b"I".to_vec()));
                }
                Session::Query { rows, fails: false } => {
                    script.push((b'T', row_description(&["a", "b"])));
                    script.extend(rows.iter().map(|r| (b'D', data_row_body(r))));
                    script.push((b'S', cstrs(&["TimeZone", "Europe/Berlin"])));
                    script.push((b'C', cstrs(&[&format!("SELECT {}", rows.len())])));
                    script.push((b'Z', b"I".to_vec()));
                }
                Session::Copy { chunks } => {
                    script.push((b'H', vec![1, 0, 1, 0, 1]));
                    script.extend(chunks.iter().map(|c| (b'd', c.clone())));
                    script.push((b'c', Vec::new()));
                    script.push((b'C', cstrs(&[&format!("COPY {}", chunks.len())])));
                    script.push((b'Z', b"I".to_vec()));
                }
                Session::Replication { messages } => {
                    script.push((b'W', vec![0, 0, 0]));
                    script.extend(messages.iter().map(|m| (b'd', m.body())));
                    script.push((b'c', Vec::new()));
                }
            }
            let mutated = mutation.is_some();
            let (ours, mut peer) = socket_pair();
            peer.write_all(&script_bytes(script, mutation.as_ref()))
                .unwrap();
            peer.shutdown(Shutdown::Write).unwrap();

            let mut conn = match fuzzing::connection(ours) {
                Ok(conn) => conn,
                Err(e) => {
                    check_pg_error(&e)?;
                    prop_assert!(mutated, "{e}");
                    return Ok(());
                }
            };
            if !mutated {
                prop_assert_eq!(conn.server_version_num(), version_num);
                prop_assert_eq!(conn.backend_pid(), pid as u32);
                prop_assert_eq!(conn.parameter("TimeZone"), Some("UTC"));
            }
            match session {
                Session::Query { rows, fails } => match conn.simple_query("SELECT a, b FROM t") {
                    Ok(got) => {
                        if !mutated {
                            prop_assert!(!fails);
                            prop_assert_eq!(got, rows);
                            prop_assert_eq!(conn.parameter("TimeZone"), Some("Europe/Berlin"));
                        }
                    }
                    Err(e) => {
                        check_pg_error(&e)?;
                        if !mutated {
                            prop_assert!(fails, "{e}");
                            prop_assert_eq!(e.sqlstate(), Some("42704"));
                        }
                    }
                },
                Session::Copy { chunks } => {
                    let mut got = Vec::new();
                    let count = conn.copy_out("COPY t TO STDOUT", &mut |data| {
                        got.push(data.to_vec());
                        Ok(())
                    });
                    if let Err(e) = &count {
                        check_pg_error(e)?;
                    }
                    if !mutated {
                        prop_assert_eq!(count.ok(), Some(chunks.len() as u64));
                        prop_assert_eq!(got, chunks);
                    }
                }
                Session::Replication { messages } => {
                    let mut stream = match conn.start_logical_replication(
                        "slot",
                        0x016B_3748,
                        &[("proto_version", "4".to_owned())],
                    ) {
                        Ok(stream) => stream,
                        Err(e) => {
                            check_pg_error(&e)?;
                            prop_assert!(mutated, "{e}");
                            return Ok(());
                        }
                    };
                    let mut got = Vec::new();
                    let end = loop {
                        match stream.recv(Duration::from_secs(30)) {
                            Ok(Some(m)) => {
                                let reply = matches!(
                                    m,
                                    ReplicationMessage::Keepalive {
                                        reply_requested: true,
                                        ..
                                    }
                                );
                                got.push(Repl::of(m));
                                if reply {
                                    stream.send_status(1, 1, 1, false).unwrap();
                                }
                            }
                            Ok(None) => return Err(TestCaseError::fail("the stream stalled")),
                            Err(e) => break e,
                        }
                    };
                    check_pg_error(&end)?;
                    prop_assert!(stream.recv(Duration::ZERO).is_err());
                    if !mutated {
                        prop_assert_eq!(got, messages);
                        prop_assert!(end.to_string().contains("ended"), "{end}");
                    }
                }
            }
            Ok(())
        },
    );
}
