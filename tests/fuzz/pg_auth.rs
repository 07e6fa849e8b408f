//! The login: replayed authentication requests against a model of which logins must
//! succeed, and a SCRAM-SHA-256 server written from the RFC.

use std::io::{Read, Write};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;

use pgwire_cdc::pg::fuzzing;
use pgwire_cdc::pg::ChannelBindingMode;
use proptest::prelude::*;

use crate::harness::{apply, mutations, run, Mutation};
use crate::pg_wire::{
    auth_request, check_pg_error, cstrs, error_body, framed, message_stream, reference_frames,
    socket_pair, LOGIN_REFUSED,
};

/// The mechanism names of an AuthenticationSASL body, read independently of the client.
fn mechanism_names(data: &[u8]) -> Option<Vec<Vec<u8>>> {
    let mut names = Vec::new();
    let mut rest = data;
    loop {
        let nul = rest.iter().position(|&b| b == 0)?;
        let name = rest[..nul].to_vec();
        rest = &rest[nul + 1..];
        if name.is_empty() {
            return rest.is_empty().then_some(names);
        }
        names.push(name);
    }
}

/// Whether the login must succeed against a server that only replays `stream` (without
/// TLS, and without ever seeing the client's nonce, so SCRAM cannot complete).
fn scripted_login_succeeds(
    stream: &[u8],
    password: bool,
    channel_binding: ChannelBindingMode,
) -> bool {
    if channel_binding == ChannelBindingMode::Require {
        return false;
    }
    let mut sasl = false;
    for (tag, body) in reference_frames(stream).0 {
        match tag {
            b'R' => {}
            b'N' => continue,
            _ => return false,
        }
        if body.len() < 4 {
            return false;
        }
        let code = i32::from_be_bytes(body[..4].try_into().unwrap());
        let data = &body[4..];
        match code {
            0 => return !sasl,
            3 if password => {}
            5 if password && data.len() == 4 => {}
            10 if !sasl && password => {
                let scram = b"SCRAM-SHA-256".to_vec();
                match mechanism_names(data) {
                    Some(names) if names.contains(&scram) => sasl = true,
                    _ => return false,
                }
            }
            _ => return false,
        }
    }
    false
}

fn auth_seeds() -> Vec<(u8, Vec<u8>)> {
    vec![
        (b'R', auth_request(0, b"")),
        (b'R', auth_request(3, b"")),
        (b'R', auth_request(5, &[0x9c, 0x1f, 0x00, 0x7e])),
        (b'R', auth_request(10, &cstrs(&["SCRAM-SHA-256", ""]))),
        (
            b'R',
            auth_request(10, &cstrs(&["SCRAM-SHA-256-PLUS", "SCRAM-SHA-256", ""])),
        ),
        (b'R', auth_request(10, &cstrs(&["SCRAM-SHA-256-PLUS", ""]))),
        (
            b'R',
            auth_request(
                11,
                b"r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096",
            ),
        ),
        (
            b'R',
            auth_request(12, b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="),
        ),
        (b'R', auth_request(7, b"")),
        (b'R', auth_request(9, b"")),
        (b'R', auth_request(2, b"")),
        (b'E', error_body(LOGIN_REFUSED)),
        (
            b'E',
            error_body(&[(b'V', "FATAL"), (b'C', "53300"), (b'M', "too many clients")]),
        ),
        (b'N', error_body(&[(b'V', "NOTICE"), (b'M', "hello")])),
        (b'S', cstrs(&["server_version", "16.2"])),
        (b'Z', b"I".to_vec()),
    ]
}

fn channel_bindings() -> impl Strategy<Value = ChannelBindingMode> {
    prop_oneof![
        Just(ChannelBindingMode::Prefer),
        Just(ChannelBindingMode::Disable),
        Just(ChannelBindingMode::Require),
    ]
}

/// The login against a server that replays (mutated) authentication requests, checked
/// against `scripted_login_succeeds`.
#[test]
fn fuzz_auth_messages() {
    let seeds = auth_seeds();
    let strategy = (
        proptest::collection::vec((0..seeds.len(), proptest::option::of(mutations())), 1..6),
        proptest::option::of(mutations()),
        proptest::option::of(prop_oneof![Just("s3cr3t"), Just("pä$$ wörd"), Just("")]),
        channel_bindings(),
    );
    run(
        "auth_messages",
        1_000,
        strategy,
        |(picks, stream_muts, password, channel_binding)| {
            let stream = message_stream(&seeds, &picks, stream_muts.as_deref());
            let (ours, mut peer) = socket_pair();
            peer.write_all(&stream).unwrap();
            peer.shutdown(Shutdown::Write).unwrap();
            let result = fuzzing::authenticate(ours, "app", password, channel_binding);
            if let Err(e) = &result {
                check_pg_error(e)?;
            }
            prop_assert_eq!(
                result.is_ok(),
                scripted_login_succeeds(&stream, password.is_some(), channel_binding),
                "{:?}",
                result
            );
            Ok(())
        },
    );
}

// A SCRAM-SHA-256 server (RFC 5802, RFC 7677), written from the RFC for the `scram` target.

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    use hmac::{KeyInit, Mac};
    let mut mac = HmacSha256::new_from_slice(key).unwrap();
    mac.update(message);
    mac.finalize().into_bytes().into()
}

fn sha256(data: &[u8]) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(data).into()
}

/// PBKDF2-HMAC-SHA-256 of one block: SCRAM's `Hi()`.
fn scram_hi(password: &[u8], salt: &[u8], iterations: u32) -> [u8; 32] {
    let mut u = hmac_sha256(password, &[salt, &[0, 0, 0, 1]].concat());
    let mut out = u;
    for _ in 1..iterations {
        u = hmac_sha256(password, &u);
        for (o, b) in out.iter_mut().zip(u) {
            *o ^= b;
        }
    }
    out
}

fn b64(data: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(data)
}

fn b64_decode(text: &str) -> Option<Vec<u8>> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.decode(text).ok()
}

/// One frontend message: tag and body.
fn read_frontend(socket: &mut UnixStream) -> Option<(u8, Vec<u8>)> {
    let mut header = [0u8; 5];
    socket.read_exact(&mut header).ok()?;
    let len = usize::try_from(i32::from_be_bytes(header[1..].try_into().unwrap())).ok()?;
    let mut body = vec![0; len.checked_sub(4)?];
    socket.read_exact(&mut body).ok()?;
    Some((header[0], body))
}

#[derive(Debug, Clone)]
struct ScramCase {
    /// The password the server's verifier was made from.
    stored: &'static str,
    /// The password the client logs in with.
    given: &'static str,
    salt: Vec<u8>,
    iterations: u32,
    server_nonce: String,
    plus_offered: bool,
    channel_binding: ChannelBindingMode,
    /// Changes to the server-first and server-final messages.
    first: Option<Vec<Mutation>>,
    last: Option<Vec<Mutation>>,
    /// The server skips SASLFinal and says AuthenticationOk at once.
    skip_final: bool,
}

/// What the server saw: whether the client's proof checked out, and whether the server's
/// messages went out unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ScramVerdict {
    proof_valid: bool,
    unchanged: bool,
}

/// Plays the server's side (`None`: the client gave up before sending its proof).
fn scram_server(mut socket: UnixStream, case: &ScramCase) -> Option<ScramVerdict> {
    socket
        .set_read_timeout(Some(fuzzing::SOCKET_TIMEOUT))
        .unwrap();
    let send = |socket: &mut UnixStream, tag: u8, body: &[u8]| {
        // The client may have given up already.
        let _ = socket.write_all(&framed(tag, body));
    };
    let mechanisms = if case.plus_offered {
        cstrs(&["SCRAM-SHA-256-PLUS", "SCRAM-SHA-256", ""])
    } else {
        cstrs(&["SCRAM-SHA-256", ""])
    };
    send(&mut socket, b'R', &auth_request(10, &mechanisms));

    // SASLInitialResponse: mechanism, length, client-first-message.
    let (tag, body) = read_frontend(&mut socket)?;
    assert_eq!(tag, b'p');
    let nul = body.iter().position(|&b| b == 0).unwrap();
    assert_eq!(&body[..nul], b"SCRAM-SHA-256");
    let client_first = std::str::from_utf8(&body[nul + 5..]).unwrap().to_owned();
    let bare = client_first.strip_prefix("n,,").unwrap();
    let client_nonce = bare.strip_prefix("n=,r=").unwrap();
    let nonce = format!("{client_nonce}{}", case.server_nonce);
    let server_first = format!("r={nonce},s={},i={}", b64(&case.salt), case.iterations);
    let first = match &case.first {
        Some(m) => apply(server_first.clone().into_bytes(), m),
        None => server_first.clone().into_bytes(),
    };
    send(&mut socket, b'R', &auth_request(11, &first));

    // SASLResponse: client-final-message.
    let (tag, body) = read_frontend(&mut socket)?;
    assert_eq!(tag, b'p');
    let client_final = String::from_utf8(body).unwrap();
    let (without_proof, proof) = client_final.rsplit_once(",p=").unwrap();
    let auth_message = format!("{bare},{server_first},{without_proof}");
    let salted = scram_hi(case.stored.as_bytes(), &case.salt, case.iterations);
    let client_key = hmac_sha256(&salted, b"Client Key");
    let stored_key = sha256(&client_key);
    let signature = hmac_sha256(&stored_key, auth_message.as_bytes());
    let proof = b64_decode(proof).unwrap_or_default();
    let recovered: Vec<u8> = proof.iter().zip(signature).map(|(p, s)| p ^ s).collect();
    let valid = without_proof == format!("c=biws,r={nonce}")
        && recovered.len() == 32
        && sha256(&recovered) == stored_key;
    if !valid {
        send(&mut socket, b'E', &error_body(LOGIN_REFUSED));
        return Some(ScramVerdict {
            proof_valid: false,
            unchanged: first == server_first.as_bytes(),
        });
    }
    let server_key = hmac_sha256(&salted, b"Server Key");
    let server_final = format!(
        "v={}",
        b64(&hmac_sha256(&server_key, auth_message.as_bytes()))
    );
    let last = match &case.last {
        Some(m) => apply(server_final.clone().into_bytes(), m),
        None => server_final.clone().into_bytes(),
    };
    if !case.skip_final {
        send(&mut socket, b'R', &auth_request(12, &last));
    }
    send(&mut socket, b'R', &auth_request(0, b""));
    Some(ScramVerdict {
        proof_valid: true,
        unchanged: first == server_first.as_bytes() && last == server_final.as_bytes(),
    })
}

#[test]
fn fuzz_scram() {
    let passwords = || prop::sample::select(vec!["s3cr3t", "correct horse battery staple", "x"]);
    let case = (
        (passwords(), passwords()),
        proptest::collection::vec(any::<u8>(), 1..24),
        prop_oneof![9 => 1u32..64, 1 => Just(4096u32)],
        "[!-+\\--~]{0,24}",
        (any::<bool>(), channel_bindings()),
        (
            proptest::option::weighted(0.3, mutations()),
            proptest::option::weighted(0.3, mutations()),
            proptest::bool::weighted(0.1),
        ),
    )
        .prop_map(
            |((stored, given), salt, iterations, server_nonce, (plus, cb), (first, last, skip))| {
                ScramCase {
                    stored,
                    given,
                    salt,
                    iterations,
                    server_nonce,
                    plus_offered: plus,
                    channel_binding: cb,
                    first,
                    last,
                    skip_final: skip,
                }
            },
        );
    run("scram", 300, case, |case| {
        let (ours, theirs) = socket_pair();
        let server = {
            let case = case.clone();
            std::thread::spawn(move || scram_server(theirs, &case))
        };
        let result = fuzzing::authenticate(ours, "app", Some(case.given), case.channel_binding);
        let verdict = server
            .join()
            .map_err(|_| TestCaseError::fail("the server panicked"))?;
        if let Err(e) = &result {
            check_pg_error(e)?;
        }
        let expected = case.channel_binding != ChannelBindingMode::Require
            && case.stored == case.given
            && !case.skip_final
            && verdict
                == Some(ScramVerdict {
                    proof_valid: true,
                    unchanged: true,
                });
        prop_assert_eq!(
            result.is_ok(),
            expected,
            "{:?}, server: {:?}",
            result,
            verdict
        );
        if case.channel_binding != ChannelBindingMode::Require
            && case.first.is_none()
            && case.stored == case.given
        {
            // An honest server always gets a valid proof.
            prop_assert_eq!(verdict.map(|v| v.proof_valid), Some(true));
        }
        Ok(())
    });
}
