//! The DNS messages the resolver reads and writes, parsed by hand and
//! bounded: a query is at most [`MAX_QUERY`] bytes, an answer at most
//! [`MAX_ANSWER`]; names are walked with a bounded number of labels and
//! compression pointers.

use std::net::IpAddr;

pub(crate) const MAX_QUERY: usize = 512;
pub(crate) const MAX_ANSWER: usize = 4096;

pub(crate) const RCODE_SERVFAIL: u8 = 2;
pub(crate) const RCODE_NXDOMAIN: u8 = 3;
pub(crate) const RCODE_REFUSED: u8 = 5;
pub(crate) const TYPE_A: u16 = 1;
pub(crate) const TYPE_CNAME: u16 = 5;
pub(crate) const TYPE_AAAA: u16 = 28;
pub(crate) const TYPE_SVCB: u16 = 64;
pub(crate) const TYPE_HTTPS: u16 = 65;

/// The one question of a query.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Question {
    /// Lowercase, dot-separated, no trailing dot.
    pub name: String,
    pub qtype: u16,
    /// Offset just past the question.
    pub end: usize,
}

/// A standard query (QR=0, opcode 0) with exactly one question, whose name
/// is plain labels (no compression).
pub(crate) fn parse_query(msg: &[u8]) -> Option<Question> {
    if msg.len() < 12 || msg.len() > MAX_QUERY {
        return None;
    }
    let (flags, qdcount) = (msg[2], u16::from_be_bytes([msg[4], msg[5]]));
    if flags & 0x80 != 0 || (flags >> 3) & 0x0f != 0 || qdcount != 1 {
        return None;
    }
    let mut pos = 12;
    let mut labels = Vec::new();
    loop {
        let len = usize::from(*msg.get(pos)?);
        pos += 1;
        if len == 0 {
            break;
        }
        if len > 63 {
            return None;
        }
        let label = msg.get(pos..pos + len)?;
        labels.push(String::from_utf8_lossy(label).to_ascii_lowercase());
        pos += len;
    }
    let qtype = u16::from_be_bytes([*msg.get(pos)?, *msg.get(pos + 1)?]);
    msg.get(pos + 3)?;
    let name = labels.join(".");
    (name.len() <= 253).then_some(Question {
        name,
        qtype,
        end: pos + 4,
    })
}

/// A reply carrying only the question and `rcode`.
pub(crate) fn error_reply(query: &[u8], q: &Question, rcode: u8) -> Vec<u8> {
    let mut out = Vec::with_capacity(q.end);
    out.extend_from_slice(&query[..2]);
    // QR, the query's opcode and RD; RA; rcode.
    out.push(0x80 | (query[2] & 0x79));
    out.push(0x80 | (rcode & 0x0f));
    out.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, 0]);
    out.extend_from_slice(&query[12..q.end]);
    out
}

/// Skips a (possibly compressed) name starting at `pos`; the offset after it.
fn skip_name(msg: &[u8], mut pos: usize) -> Option<usize> {
    for _ in 0..128 {
        let len = *msg.get(pos)?;
        match len {
            0 => return Some(pos + 1),
            l if l & 0xc0 == 0xc0 => {
                msg.get(pos + 1)?;
                return Some(pos + 2);
            }
            l if l <= 63 => pos += 1 + usize::from(l),
            _ => return None,
        }
    }
    None
}

/// The A and AAAA records of a response's answer section, with TTLs.
pub(crate) fn answer_addresses(msg: &[u8]) -> Option<Vec<(IpAddr, u32)>> {
    if msg.len() < 12 || msg.len() > MAX_ANSWER {
        return None;
    }
    let qdcount = u16::from_be_bytes([msg[4], msg[5]]);
    let ancount = u16::from_be_bytes([msg[6], msg[7]]);
    let mut pos = 12;
    for _ in 0..qdcount {
        pos = skip_name(msg, pos)? + 4;
    }
    let mut out = Vec::new();
    for _ in 0..ancount {
        pos = skip_name(msg, pos)?;
        let head = msg.get(pos..pos + 10)?;
        let rtype = u16::from_be_bytes([head[0], head[1]]);
        let class = u16::from_be_bytes([head[2], head[3]]);
        let ttl = u32::from_be_bytes([head[4], head[5], head[6], head[7]]);
        let rdlen = usize::from(u16::from_be_bytes([head[8], head[9]]));
        let data = msg.get(pos + 10..pos + 10 + rdlen)?;
        match (rtype, class, rdlen) {
            (TYPE_A, 1, 4) => {
                let a: [u8; 4] = data.try_into().ok()?;
                out.push((IpAddr::from(a), ttl));
            }
            (TYPE_AAAA, 1, 16) => {
                let a: [u8; 16] = data.try_into().ok()?;
                out.push((IpAddr::from(a), ttl));
            }
            _ => {}
        }
        pos += 10 + rdlen;
    }
    Some(out)
}

/// Lowers every answer record's TTL to at most `max`, so the client
/// forgets an address no later than the sandbox's rules do.
pub(crate) fn cap_ttls(msg: &mut [u8], max: u32) -> Option<()> {
    let qdcount = u16::from_be_bytes([*msg.get(4)?, *msg.get(5)?]);
    let ancount = u16::from_be_bytes([*msg.get(6)?, *msg.get(7)?]);
    let mut pos = 12;
    for _ in 0..qdcount {
        pos = skip_name(msg, pos)? + 4;
    }
    for _ in 0..ancount {
        pos = skip_name(msg, pos)?;
        let ttl_at = pos + 4;
        let ttl = u32::from_be_bytes(msg.get(ttl_at..ttl_at + 4)?.try_into().ok()?);
        msg.get_mut(ttl_at..ttl_at + 4)?
            .copy_from_slice(&ttl.min(max).to_be_bytes());
        let rdlen = usize::from(u16::from_be_bytes([*msg.get(pos + 8)?, *msg.get(pos + 9)?]));
        pos += 10 + rdlen;
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(name: &str, qtype: u16) -> Vec<u8> {
        let mut q = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
        for label in name.split('.') {
            q.push(label.len() as u8);
            q.extend_from_slice(label.as_bytes());
        }
        q.push(0);
        q.extend_from_slice(&qtype.to_be_bytes());
        q.extend_from_slice(&[0, 1]);
        q
    }

    #[test]
    fn queries_parse_and_refusals_echo_the_question() {
        let q = query("API.GitHub.com", TYPE_A);
        let parsed = parse_query(&q).unwrap();
        assert_eq!(parsed.name, "api.github.com");
        assert_eq!(parsed.qtype, TYPE_A);
        assert_eq!(parsed.end, q.len());
        let r = error_reply(&q, &parsed, RCODE_NXDOMAIN);
        assert_eq!(&r[..2], &[0x12, 0x34]);
        assert_eq!(r[2], 0x81, "QR and RD");
        assert_eq!(r[3] & 0x0f, RCODE_NXDOMAIN);
        assert_eq!(&r[12..], &q[12..]);
        assert_eq!(answer_addresses(&r).unwrap(), vec![]);

        // Not queries: a response, two questions, truncated, oversized,
        // a compression pointer in the question.
        let mut resp = q.clone();
        resp[2] |= 0x80;
        assert_eq!(parse_query(&resp), None);
        let mut two = q.clone();
        two[5] = 2;
        assert_eq!(parse_query(&two), None);
        assert_eq!(parse_query(&q[..q.len() - 1]), None);
        assert_eq!(parse_query(&q[..11]), None);
        assert_eq!(parse_query(&[q.clone(), vec![0; 600]].concat()), None);
        let mut ptr = q[..12].to_vec();
        ptr.extend_from_slice(&[0xc0, 0x0c, 0, 1, 0, 1]);
        assert_eq!(parse_query(&ptr), None);
    }

    #[test]
    fn answers_yield_addresses_with_ttls_through_compression() {
        let q = query("a.test", TYPE_A);
        let mut r = q.clone();
        r[2] = 0x81;
        r[3] = 0x80;
        r[7] = 3; // three answers
        // CNAME (skipped), A, AAAA; names are pointers to the question.
        r.extend_from_slice(&[0xc0, 12, 0, 5, 0, 1, 0, 0, 0, 9, 0, 2, 0xc0, 12]);
        r.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 198, 51, 100, 10]);
        r.extend_from_slice(&[0xc0, 12, 0, 28, 0, 1, 0, 0, 1, 0, 0, 16]);
        r.extend_from_slice(&[0x20, 1, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        let got = answer_addresses(&r).unwrap();
        assert_eq!(
            got,
            vec![
                ("198.51.100.10".parse().unwrap(), 60),
                ("2001:db8::1".parse().unwrap(), 256)
            ]
        );
        // A record cut short: no answer rather than garbage.
        assert_eq!(answer_addresses(&r[..r.len() - 3]), None);
        // A pointer loop is bounded.
        let mut lp = r[..12].to_vec();
        lp[5] = 1;
        lp.extend_from_slice(&[1, b'a', 0xc0]);
        assert_eq!(answer_addresses(&lp), None);
    }

    #[test]
    fn answer_ttls_are_capped_in_place() {
        let q = query("a.test", TYPE_A);
        let mut r = q.clone();
        r[2] = 0x81;
        r[3] = 0x80;
        r[7] = 2;
        r.extend_from_slice(&[
            0xc0, 12, 0, 1, 0, 1, 0, 1, 0x51, 0x80, 0, 4, 198, 51, 100, 10,
        ]);
        r.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 30, 0, 4, 198, 51, 100, 11]);
        cap_ttls(&mut r, 300).unwrap();
        assert_eq!(
            answer_addresses(&r).unwrap(),
            vec![
                ("198.51.100.10".parse().unwrap(), 300),
                ("198.51.100.11".parse().unwrap(), 30)
            ]
        );
        assert_eq!(cap_ttls(&mut r[..r.len() - 5].to_vec(), 300), None);
    }
}
