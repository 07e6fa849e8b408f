//! Bodies of the backend messages the client reads (protocol chapter, "Message
//! Formats"), parsed from borrowed bytes. Each parser checks every length before it
//! slices and rejects trailing bytes, so a malformed message is a `Protocol` error, never
//! a panic.

use super::error::{ErrorObject, PgError, ServerError};

pub(crate) const AUTHENTICATION: u8 = b'R';
pub(crate) const BACKEND_KEY_DATA: u8 = b'K';
pub(crate) const COMMAND_COMPLETE: u8 = b'C';
pub(crate) const COPY_BOTH_RESPONSE: u8 = b'W';
pub(crate) const COPY_DATA: u8 = b'd';
pub(crate) const COPY_DONE: u8 = b'c';
pub(crate) const COPY_IN_RESPONSE: u8 = b'G';
pub(crate) const COPY_OUT_RESPONSE: u8 = b'H';
pub(crate) const DATA_ROW: u8 = b'D';
pub(crate) const EMPTY_QUERY_RESPONSE: u8 = b'I';
pub(crate) const ERROR_RESPONSE: u8 = b'E';
pub(crate) const NEGOTIATE_PROTOCOL_VERSION: u8 = b'v';
pub(crate) const NOTICE_RESPONSE: u8 = b'N';
pub(crate) const NOTIFICATION_RESPONSE: u8 = b'A';
pub(crate) const PARAMETER_STATUS: u8 = b'S';
pub(crate) const READY_FOR_QUERY: u8 = b'Z';
pub(crate) const ROW_DESCRIPTION: u8 = b'T';

/// A bounds-checked reader over one message body.
pub(crate) struct Cursor<'a> {
    buf: &'a [u8],
    what: &'static str,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(buf: &'a [u8], what: &'static str) -> Self {
        Cursor { buf, what }
    }

    fn short(&self) -> PgError {
        PgError::protocol(format!("{} message is too short", self.what))
    }

    pub(crate) fn bytes(&mut self, n: usize) -> Result<&'a [u8], PgError> {
        let (head, rest) = self.buf.split_at_checked(n).ok_or_else(|| self.short())?;
        self.buf = rest;
        Ok(head)
    }

    pub(crate) fn u8(&mut self) -> Result<u8, PgError> {
        let (&b, rest) = self.buf.split_first().ok_or_else(|| self.short())?;
        self.buf = rest;
        Ok(b)
    }

    pub(crate) fn i16(&mut self) -> Result<i16, PgError> {
        let b = self.bytes(2)?;
        Ok(i16::from_be_bytes(b.try_into().map_err(|_| self.short())?))
    }

    pub(crate) fn i32(&mut self) -> Result<i32, PgError> {
        let b = self.bytes(4)?;
        Ok(i32::from_be_bytes(b.try_into().map_err(|_| self.short())?))
    }

    pub(crate) fn u64(&mut self) -> Result<u64, PgError> {
        let b = self.bytes(8)?;
        Ok(u64::from_be_bytes(b.try_into().map_err(|_| self.short())?))
    }

    pub(crate) fn i64(&mut self) -> Result<i64, PgError> {
        let b = self.bytes(8)?;
        Ok(i64::from_be_bytes(b.try_into().map_err(|_| self.short())?))
    }

    /// A NUL-terminated string (lossily decoded: messages before the client encoding is
    /// set may use the server's).
    pub(crate) fn cstr(&mut self) -> Result<String, PgError> {
        let nul = self.buf.iter().position(|&b| b == 0).ok_or_else(|| {
            PgError::protocol(format!("unterminated string in {} message", self.what))
        })?;
        let text = self.bytes(nul)?;
        self.bytes(1)?;
        Ok(String::from_utf8_lossy(text).into_owned())
    }

    pub(crate) fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.buf)
    }

    pub(crate) fn finish(&self) -> Result<(), PgError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(PgError::protocol(format!(
                "{} message has {} unexpected trailing bytes",
                self.what,
                self.buf.len()
            )))
        }
    }
}

/// ErrorResponse / NoticeResponse: `(field type byte, string)*` then a zero byte.
pub(crate) fn error_fields(body: &[u8]) -> Result<ServerError, PgError> {
    let mut c = Cursor::new(body, "ErrorResponse");
    let mut err = ServerError {
        sqlstate: String::new(),
        severity: String::new(),
        message: String::new(),
        hint: None,
        detail: None,
        object: ErrorObject::Unspecified,
    };
    let mut localized_severity = String::new();
    loop {
        let field = c.u8()?;
        if field == 0 {
            break;
        }
        let value = c.cstr()?;
        match field {
            b'S' => localized_severity = value,
            // 'V' is never translated (9.6+); prefer it.
            b'V' => err.severity = value,
            b'C' => err.sqlstate = value,
            b'M' => err.message = value,
            b'D' => err.detail = Some(value),
            b'H' => err.hint = Some(value),
            _ => {}
        }
    }
    c.finish()?;
    if err.severity.is_empty() {
        err.severity = localized_severity;
    }
    Ok(err)
}

/// ParameterStatus: name and value.
pub(crate) fn parameter_status(body: &[u8]) -> Result<(String, String), PgError> {
    let mut c = Cursor::new(body, "ParameterStatus");
    let name = c.cstr()?;
    let value = c.cstr()?;
    c.finish()?;
    Ok((name, value))
}

/// CommandComplete: the command tag, e.g. `COPY 42`, `SELECT 3`.
pub(crate) fn command_tag(body: &[u8]) -> Result<String, PgError> {
    let mut c = Cursor::new(body, "CommandComplete");
    let tag = c.cstr()?;
    c.finish()?;
    Ok(tag)
}

/// The row count at the end of a command tag (`INSERT 0 5` -> 5, `COPY 42` -> 42).
pub(crate) fn tag_row_count(tag: &str) -> Option<u64> {
    tag.rsplit(' ').next()?.parse().ok()
}

/// DataRow: a count, then each column as `i32` length (-1 for NULL) and bytes. Values
/// are text format here (the simple-query protocol).
pub(crate) fn data_row(body: &[u8]) -> Result<Vec<Option<String>>, PgError> {
    let mut c = Cursor::new(body, "DataRow");
    let count = c.i16()?;
    let count = usize::try_from(count)
        .map_err(|_| PgError::protocol("DataRow message with a negative column count"))?;
    // Each column takes at least 4 bytes, so the body bounds the count.
    let mut row = Vec::with_capacity(count.min(body.len() / 4));
    for _ in 0..count {
        let len = c.i32()?;
        if len == -1 {
            row.push(None);
            continue;
        }
        let len = usize::try_from(len)
            .map_err(|_| PgError::protocol("DataRow message with a negative value length"))?;
        let bytes = c.bytes(len)?;
        let text = std::str::from_utf8(bytes).map_err(|_| {
            PgError::protocol("DataRow value is not UTF-8 (client_encoding is UTF8)")
        })?;
        row.push(Some(text.to_owned()));
    }
    c.finish()?;
    Ok(row)
}

/// BackendKeyData: process id and cancel key (4 bytes in protocol 3.0).
pub(crate) fn backend_key_data(body: &[u8]) -> Result<(u32, Vec<u8>), PgError> {
    let mut c = Cursor::new(body, "BackendKeyData");
    let pid = c.i32()?;
    let key = c.rest().to_vec();
    Ok((u32::from_ne_bytes(pid.to_ne_bytes()), key))
}

/// ReadyForQuery: the transaction status (`I` idle, `T` in a transaction, `E` failed).
pub(crate) fn ready_for_query(body: &[u8]) -> Result<u8, PgError> {
    let mut c = Cursor::new(body, "ReadyForQuery");
    let status = c.u8()?;
    c.finish()?;
    Ok(status)
}

/// A message that may arrive at any time and carries nothing the caller waits for.
pub(crate) fn is_asynchronous(tag: u8) -> bool {
    matches!(
        tag,
        NOTICE_RESPONSE | NOTIFICATION_RESPONSE | PARAMETER_STATUS
    )
}

/// A readable name for an unexpected tag in errors.
pub(crate) fn tag_name(tag: u8) -> String {
    let name = match tag {
        AUTHENTICATION => "Authentication",
        BACKEND_KEY_DATA => "BackendKeyData",
        COMMAND_COMPLETE => "CommandComplete",
        COPY_BOTH_RESPONSE => "CopyBothResponse",
        COPY_DATA => "CopyData",
        COPY_DONE => "CopyDone",
        COPY_IN_RESPONSE => "CopyInResponse",
        COPY_OUT_RESPONSE => "CopyOutResponse",
        DATA_ROW => "DataRow",
        EMPTY_QUERY_RESPONSE => "EmptyQueryResponse",
        ERROR_RESPONSE => "ErrorResponse",
        NEGOTIATE_PROTOCOL_VERSION => "NegotiateProtocolVersion",
        NOTICE_RESPONSE => "NoticeResponse",
        NOTIFICATION_RESPONSE => "NotificationResponse",
        PARAMETER_STATUS => "ParameterStatus",
        READY_FOR_QUERY => "ReadyForQuery",
        ROW_DESCRIPTION => "RowDescription",
        _ => return format!("message of type {:?}", char::from(tag)),
    };
    name.to_owned()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]
    use super::*;

    #[test]
    fn error_fields_prefer_the_untranslated_severity() {
        let body = b"SFEHLER\0VERROR\0C42704\0Mreplication slot \"s\" does not exist\0DKey (id)=(1)\0Htry again\0\0";
        let e = error_fields(body).unwrap();
        assert_eq!(e.severity, "ERROR");
        assert_eq!(e.sqlstate, "42704");
        assert_eq!(e.message, "replication slot \"s\" does not exist");
        assert_eq!(e.hint.as_deref(), Some("try again"));
        assert_eq!(e.detail.as_deref(), Some("Key (id)=(1)"));
        assert!(error_fields(b"SERROR\0C4270").is_err());
        assert!(error_fields(b"SERROR\0").is_err());
    }

    #[test]
    fn data_rows_check_their_lengths() {
        let row = [0, 2, 0, 0, 0, 2, b'h', b'i', 0xff, 0xff, 0xff, 0xff];
        assert_eq!(data_row(&row).unwrap(), vec![Some("hi".into()), None]);
        for cut in 0..row.len() {
            assert!(data_row(&row[..cut]).is_err(), "cut {cut}");
        }
        assert!(data_row(&[0, 1, 0x80, 0, 0, 0]).is_err());
        assert!(data_row(&[0xff, 0xff]).is_err());
        assert!(data_row(&[0, 0, 1]).is_err());
    }

    #[test]
    fn command_tags_give_row_counts() {
        assert_eq!(tag_row_count("COPY 42"), Some(42));
        assert_eq!(tag_row_count("INSERT 0 5"), Some(5));
        assert_eq!(tag_row_count("CREATE_REPLICATION_SLOT"), None);
    }
}
