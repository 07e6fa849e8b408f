//! inet, cidr, macaddr and macaddr8: text checked and passed through, binary written as
//! the output functions print it (`network_out`, `macaddr_out`, `macaddr8_out`).
//!
//! inet/cidr binary format (`network_send`):
//! ```text
//! Byte  family   2 = IPv4 (PGSQL_AF_INET), 3 = IPv6 (PGSQL_AF_INET6)
//! Byte  bits     netmask length
//! Byte  is_cidr  (ignored on input by PostgreSQL too: the column type decides)
//! Byte  nb       address length: 4 or 16
//! Byte[nb]       address, network order
//! ```
//! Output: IPv4 always as four octets; IPv6 with the longest run (first of equals) of at
//! least two zero groups as `::`, and the last 32 bits dotted after `::` (IPv4-compatible)
//! or `::ffff:` (IPv4-mapped); the `/bits` suffix left out for an inet host address
//! (full-length mask) and always present for cidr.

use std::fmt::Write as _;
use std::net::{Ipv4Addr, Ipv6Addr};

use super::error::ValueError;

const FAMILY_INET: u8 = 2;
const FAMILY_INET6: u8 = 3;

/// inet or cidr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetKind {
    Inet,
    Cidr,
}

impl NetKind {
    fn name(self) -> &'static str {
        match self {
            Self::Inet => "inet",
            Self::Cidr => "cidr",
        }
    }
}

/// inet/cidr text: `address[/bits]` checked, passed through (cidr always has `/bits`).
pub fn net_text(s: &str, kind: NetKind) -> Result<&str, ValueError> {
    let ty = kind.name();
    let (addr, bits) = match s.split_once('/') {
        Some((addr, bits)) => (addr, Some(bits)),
        None => (s, None),
    };
    let max_bits = if addr.parse::<Ipv4Addr>().is_ok() {
        32
    } else if addr.contains(':') && addr.parse::<Ipv6Addr>().is_ok() {
        128
    } else {
        return Err(ValueError::malformed(ty));
    };
    match (bits, kind) {
        (None, NetKind::Inet) => {}
        (None, NetKind::Cidr) => return Err(ValueError::malformed(ty)),
        (Some(bits), _) => {
            let valid = !bits.is_empty()
                && bits.len() <= 3
                && bits.bytes().all(|b| b.is_ascii_digit())
                && bits.parse::<u32>().is_ok_and(|b| b <= max_bits);
            if !valid {
                return Err(ValueError::malformed(ty));
            }
        }
    }
    Ok(s)
}

/// inet/cidr binary -> `network_out` text into `out` (cleared first).
pub fn net_binary(b: &[u8], kind: NetKind, out: &mut String) -> Result<(), ValueError> {
    let ty = kind.name();
    let (&[family, bits, _is_cidr, nb], addr) = b
        .split_first_chunk::<4>()
        .ok_or(ValueError::malformed(ty))?;
    out.clear();
    match (family, nb) {
        (FAMILY_INET, 4) => {
            let octets: [u8; 4] = addr.try_into().map_err(|_| ValueError::malformed(ty))?;
            if bits > 32 {
                return Err(ValueError::malformed(ty));
            }
            let [a, b, c, d] = octets;
            let _ = write!(out, "{a}.{b}.{c}.{d}");
            if bits != 32 || kind == NetKind::Cidr {
                let _ = write!(out, "/{bits}");
            }
        }
        (FAMILY_INET6, 16) => {
            let octets: [u8; 16] = addr.try_into().map_err(|_| ValueError::malformed(ty))?;
            if bits > 128 {
                return Err(ValueError::malformed(ty));
            }
            write_ipv6(out, &octets);
            if bits != 128 || kind == NetKind::Cidr {
                let _ = write!(out, "/{bits}");
            }
        }
        _ => return Err(ValueError::malformed(ty)),
    }
    Ok(())
}

/// IPv6 as PostgreSQL's `inet_net_ntop` writes it (see the module docs; differs from
/// RFC 5952 in the dotted forms it chooses).
fn write_ipv6(out: &mut String, octets: &[u8; 16]) {
    let mut words = [0u16; 8];
    for (word, pair) in words.iter_mut().zip(octets.chunks_exact(2)) {
        *word = pair.iter().fold(0, |acc, &b| acc << 8 | u16::from(b));
    }
    // The longest run of zero words; the first wins a tie; a lone zero is not a run.
    let mut best: Option<(usize, usize)> = None;
    let mut run: Option<(usize, usize)> = None;
    for (i, &w) in words.iter().enumerate() {
        if w == 0 {
            run = Some(run.map_or((i, 1), |(start, len)| (start, len + 1)));
        } else {
            run = None;
        }
        if let Some((start, len)) = run {
            if best.map_or(true, |(_, best_len)| len > best_len) {
                best = Some((start, len));
            }
        }
    }
    let best = best.filter(|&(_, len)| len >= 2);
    for (i, &w) in words.iter().enumerate() {
        if let Some((start, len)) = best {
            if (start..start + len).contains(&i) {
                if i == start {
                    out.push(':');
                }
                continue;
            }
        }
        if i != 0 {
            out.push(':');
        }
        // A trailing IPv4 address after six zero words, or after five and ffff.
        let embeds_v4 = i == 6
            && match best {
                Some((0, 6)) => true,
                Some((0, 5)) => words.get(5) == Some(&0xffff),
                _ => false,
            };
        if embeds_v4 {
            if let Some(&[a, b, c, d]) = octets.last_chunk::<4>() {
                let _ = write!(out, "{a}.{b}.{c}.{d}");
            }
            return;
        }
        let _ = write!(out, "{w:x}");
    }
    if best.is_some_and(|(start, len)| start + len == 8) {
        out.push(':');
    }
}

/// macaddr (6 bytes) / macaddr8 (8 bytes) text: `xx:xx:...` checked, passed through.
pub fn mac_text(s: &str, len: usize) -> Result<&str, ValueError> {
    let ty = mac_name(len);
    let mut groups = 0;
    for group in s.split(':') {
        if group.len() != 2 || !group.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(ValueError::malformed(ty));
        }
        groups += 1;
    }
    if groups != len {
        return Err(ValueError::malformed(ty));
    }
    Ok(s)
}

/// macaddr / macaddr8 binary: the raw octets -> `08:00:2b:01:02:03`.
pub fn mac_binary(b: &[u8], len: usize, out: &mut String) -> Result<(), ValueError> {
    if b.len() != len {
        return Err(ValueError::malformed(mac_name(len)));
    }
    out.clear();
    for (i, byte) in b.iter().enumerate() {
        if i > 0 {
            out.push(':');
        }
        let _ = write!(out, "{byte:02x}");
    }
    Ok(())
}

fn mac_name(len: usize) -> &'static str {
    if len == 8 {
        "macaddr8"
    } else {
        "macaddr"
    }
}
