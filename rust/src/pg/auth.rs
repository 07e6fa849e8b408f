//! The authentication exchange of the startup phase (protocol chapter, "Start-up" and
//! "SASL Authentication").
//!
//! The server sends AuthenticationXXX requests ('R' messages with a code) until it sends
//! AuthenticationOk or an ErrorResponse:
//! * 3 cleartext password: the password in a PasswordMessage;
//! * 5 MD5: `"md5" || md5(md5(password || user) || salt)` in hex;
//! * 10 SASL: the list of mechanisms; we run SCRAM-SHA-256 (RFC 7677), or
//!   SCRAM-SHA-256-PLUS with `tls-server-end-point` channel binding over TLS, exchanging
//!   SASLInitialResponse, SASLContinue (11), SASLResponse and SASLFinal (12).
//!
//! SCRAM itself (nonce, SASLprep, proofs, the server signature check) and the MD5 hash
//! come from `postgres-protocol`. `channel_binding` follows libpq: `require` refuses any
//! login that did not bind to the TLS channel, including one the server accepts with no
//! password at all.

use postgres_protocol::authentication::md5_hash;
use postgres_protocol::authentication::sasl::{
    ChannelBinding, ScramSha256, SCRAM_SHA_256, SCRAM_SHA_256_PLUS,
};
use postgres_protocol::message::frontend;

use super::backend::{self, Cursor};
use super::dsn::ChannelBindingMode;
use super::error::PgError;
use super::io::Wire;
use super::tls;

const AUTH_OK: i32 = 0;
const AUTH_CLEARTEXT: i32 = 3;
const AUTH_MD5: i32 = 5;
const AUTH_SASL: i32 = 10;
const AUTH_SASL_CONTINUE: i32 = 11;
const AUTH_SASL_FINAL: i32 = 12;

/// What the login needs to know.
pub(crate) struct Login<'a> {
    pub user: &'a str,
    pub password: Option<&'a str>,
    pub channel_binding: ChannelBindingMode,
}

/// Runs the exchange up to AuthenticationOk.
#[allow(
    clippy::too_many_lines,
    reason = "the authentication exchange message by message, in the order the protocol runs it"
)]
pub(crate) fn authenticate(wire: &mut Wire, login: &Login<'_>) -> Result<(), PgError> {
    let tls = wire.stream().tls().is_some();
    if login.channel_binding == ChannelBindingMode::Require && !tls {
        return Err(PgError::auth(
            "channel binding required, but TLS is not in use (check sslmode)",
        ));
    }
    let mut scram: Option<(ScramSha256, bool)> = None;
    let mut bound = false;
    loop {
        let frame = wire.frame()?;
        let body = wire.body(&frame)?;
        match frame.tag {
            backend::AUTHENTICATION => {}
            backend::ERROR_RESPONSE => {
                return Err(PgError::from_server(backend::error_fields(body)?, true));
            }
            backend::NOTICE_RESPONSE => continue,
            tag => {
                return Err(PgError::protocol(format!(
                    "expected an authentication request, got {}",
                    backend::tag_name(tag)
                )))
            }
        }
        let mut c = Cursor::new(body, "Authentication");
        let code = c.i32()?;
        let data = c.rest().to_vec();
        match code {
            AUTH_OK => {
                if let Some((_, true)) = scram {
                    return Err(PgError::auth(
                        "the server accepted the login without completing SCRAM authentication",
                    ));
                }
                if login.channel_binding == ChannelBindingMode::Require && !bound {
                    return Err(PgError::auth(
                        "channel binding required, but the server authenticated the client \
                         without channel binding",
                    ));
                }
                return Ok(());
            }
            AUTH_CLEARTEXT | AUTH_MD5 => {
                refuse_unbound(login)?;
                let password = need_password(login)?;
                let response = if code == AUTH_MD5 {
                    let salt: [u8; 4] = data.as_slice().try_into().map_err(|_| {
                        PgError::protocol("MD5 authentication request without a 4-byte salt")
                    })?;
                    md5_hash(login.user.as_bytes(), password.as_bytes(), salt).into_bytes()
                } else {
                    password.as_bytes().to_vec()
                };
                frontend::password_message(&response, &mut wire.out).map_err(|e| {
                    PgError::protocol(format!("cannot encode the password message: {e}"))
                })?;
                wire.flush()?;
            }
            AUTH_SASL => {
                if scram.is_some() {
                    return Err(PgError::protocol("second SASL authentication request"));
                }
                let mechanisms = sasl_mechanisms(&data)?;
                let (mechanism, binding) = choose_mechanism(wire, login, &mechanisms)?;
                bound = mechanism == SCRAM_SHA_256_PLUS;
                let password = need_password(login)?;
                let state = ScramSha256::new(password.as_bytes(), binding);
                frontend::sasl_initial_response(mechanism, state.message(), &mut wire.out)
                    .map_err(|e| {
                        PgError::protocol(format!("cannot encode the SASL message: {e}"))
                    })?;
                wire.flush()?;
                scram = Some((state, true));
            }
            AUTH_SASL_CONTINUE => {
                let Some((state, true)) = scram.as_mut() else {
                    return Err(PgError::protocol("SASLContinue without a SASL exchange"));
                };
                state.update(&data).map_err(|e| {
                    PgError::auth(format!("invalid SCRAM server-first message: {e}"))
                })?;
                frontend::sasl_response(state.message(), &mut wire.out).map_err(|e| {
                    PgError::protocol(format!("cannot encode the SASL message: {e}"))
                })?;
                wire.flush()?;
            }
            AUTH_SASL_FINAL => {
                let Some((state, pending)) = scram.as_mut() else {
                    return Err(PgError::protocol("SASLFinal without a SASL exchange"));
                };
                // Checks the server signature: proof that the server knows the password
                // verifier, so a man in the middle cannot just say "Ok".
                state
                    .finish(&data)
                    .map_err(|e| PgError::auth(format!("SCRAM server signature rejected: {e}")))?;
                *pending = false;
            }
            other => {
                return Err(PgError::auth(format!(
                    "unsupported authentication method requested by the server (code {other}); \
                     supported: trust, password, md5, scram-sha-256"
                )))
            }
        }
    }
}

fn need_password<'a>(login: &Login<'a>) -> Result<&'a str, PgError> {
    login.password.ok_or_else(|| {
        PgError::auth(
            "the server requested password authentication, but no password was supplied \
             (password, PGPASSWORD or the password file)",
        )
    })
}

fn refuse_unbound(login: &Login<'_>) -> Result<(), PgError> {
    if login.channel_binding == ChannelBindingMode::Require {
        return Err(PgError::auth(
            "channel binding required, but the server requested an authentication method \
             without channel binding",
        ));
    }
    Ok(())
}

/// The AuthenticationSASL body: mechanism names, each NUL-terminated, then an empty one.
pub(crate) fn sasl_mechanisms(data: &[u8]) -> Result<Vec<String>, PgError> {
    let mut c = Cursor::new(data, "AuthenticationSASL");
    let mut names = Vec::new();
    loop {
        let name = c.cstr()?;
        if name.is_empty() {
            break;
        }
        names.push(name);
    }
    c.finish()?;
    Ok(names)
}

/// SCRAM-SHA-256-PLUS when TLS is up, the server offers it, channel binding is not
/// disabled and the certificate allows it; else SCRAM-SHA-256 with the GS2 flag saying
/// why there is no binding (`y`: "I could, you did not offer", `n`: "I cannot").
fn choose_mechanism(
    wire: &Wire,
    login: &Login<'_>,
    mechanisms: &[String],
) -> Result<(&'static str, ChannelBinding), PgError> {
    let offers = |name: &str| mechanisms.iter().any(|m| m == name);
    let tls = wire.stream().tls();
    let want_binding = login.channel_binding != ChannelBindingMode::Disable;
    if want_binding && offers(SCRAM_SHA_256_PLUS) {
        let end_point = tls
            .and_then(|conn| conn.peer_certificates())
            .and_then(|certs| certs.first())
            .and_then(|cert| tls::server_end_point(cert));
        if let Some(hash) = end_point {
            return Ok((
                SCRAM_SHA_256_PLUS,
                ChannelBinding::tls_server_end_point(hash),
            ));
        }
    }
    if login.channel_binding == ChannelBindingMode::Require {
        return Err(PgError::auth(
            "channel binding is required, but the server did not offer SCRAM-SHA-256-PLUS \
             (or its certificate's signature algorithm does not allow tls-server-end-point)",
        ));
    }
    if !offers(SCRAM_SHA_256) {
        return Err(PgError::auth(format!(
            "none of the server's SASL mechanisms ({}) is supported",
            mechanisms.join(", ")
        )));
    }
    let binding = if want_binding && tls.is_some() && !offers(SCRAM_SHA_256_PLUS) {
        ChannelBinding::unrequested()
    } else {
        ChannelBinding::unsupported()
    };
    Ok((SCRAM_SHA_256, binding))
}
