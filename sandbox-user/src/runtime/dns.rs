//! A small DNS stub client, for one purpose: the addresses of an `allow_hosts` name *and how
//! long each may be used* (its TTL), which `getaddrinfo` does not tell. It asks the host's
//! nameservers for A and AAAA records, follows the CNAME chain inside the answer, falls back
//! to TCP when the answer is truncated, and takes the smallest TTL along the chain.
//!
//! Parsing is bounds-checked throughout: an answer is untrusted input.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

const TYPE_A: u16 = 1;
const TYPE_CNAME: u16 = 5;
const TYPE_AAAA: u16 = 28;
const CLASS_IN: u16 = 1;
const FLAG_RESPONSE: u16 = 0x8000;
const FLAG_TRUNCATED: u16 = 0x0200;
const FLAG_RECURSION_DESIRED: u16 = 0x0100;
const RCODE_NXDOMAIN: u16 = 3;

/// One address and the seconds it may be used for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    pub addr: IpAddr,
    pub ttl: u32,
}

/// A and AAAA records of `name` from the first of `servers` that answers. `Ok(vec![])`
/// when the name exists without addresses or does not exist (NXDOMAIN).
pub fn lookup(name: &str, servers: &[IpAddr], timeout: Duration) -> Result<Vec<Record>, String> {
    if servers.is_empty() {
        return Err("no nameserver in /etc/resolv.conf".into());
    }
    let mut out = Vec::new();
    for qtype in [TYPE_A, TYPE_AAAA] {
        let mut last = String::new();
        let mut answered = false;
        for s in servers {
            match exchange(SocketAddr::new(*s, 53), name, qtype, timeout) {
                Ok(records) => {
                    out.extend(records);
                    answered = true;
                    break;
                }
                Err(e) => last = format!("{s}: {e}"),
            }
        }
        if !answered {
            return Err(last);
        }
    }
    Ok(out)
}

/// One question to one server: UDP, then TCP if the answer was truncated.
fn exchange(
    server: SocketAddr,
    name: &str,
    qtype: u16,
    timeout: Duration,
) -> Result<Vec<Record>, String> {
    let id = random_id();
    let query = encode_query(id, name, qtype)?;
    let bind: SocketAddr = if server.is_ipv4() {
        (Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let sock = UdpSocket::bind(bind).map_err(|e| e.to_string())?;
    sock.connect(server).map_err(|e| e.to_string())?;
    sock.send(&query).map_err(|e| e.to_string())?;
    let deadline = Instant::now() + timeout;
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err("no answer".into());
        }
        sock.set_read_timeout(Some(left))
            .map_err(|e| e.to_string())?;
        let n = sock.recv(&mut buf).map_err(|e| match e.kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => "no answer".into(),
            _ => e.to_string(),
        })?;
        // Anything that is not the answer to this question is ignored (spoofing, late
        // answers to an earlier question).
        match parse_answer(&buf[..n], id, name, qtype) {
            Ok(Parsed::Records(r)) => return Ok(r),
            Ok(Parsed::Truncated) => return exchange_tcp(server, &query, id, name, qtype, timeout),
            Err(Mismatch::NotOurs) => {}
            Err(Mismatch::Bad(e)) => return Err(e),
        }
    }
}

fn exchange_tcp(
    server: SocketAddr,
    query: &[u8],
    id: u16,
    name: &str,
    qtype: u16,
    timeout: Duration,
) -> Result<Vec<Record>, String> {
    let mut s = TcpStream::connect_timeout(&server, timeout).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    s.set_write_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    let len = u16::try_from(query.len()).map_err(|_| "query too long")?;
    let mut msg = len.to_be_bytes().to_vec();
    msg.extend_from_slice(query);
    s.write_all(&msg).map_err(|e| e.to_string())?;
    let mut len = [0u8; 2];
    s.read_exact(&mut len).map_err(|e| e.to_string())?;
    let mut buf = vec![0u8; usize::from(u16::from_be_bytes(len))];
    s.read_exact(&mut buf).map_err(|e| e.to_string())?;
    match parse_answer(&buf, id, name, qtype) {
        Ok(Parsed::Records(r)) => Ok(r),
        Ok(Parsed::Truncated) => Err("truncated answer over TCP".into()),
        Err(Mismatch::NotOurs) => Err("answer to another question".into()),
        Err(Mismatch::Bad(e)) => Err(e),
    }
}

fn random_id() -> u16 {
    let mut b = [0u8; 2];
    // SAFETY: getrandom writes at most 2 bytes into the 2-byte buffer.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), 2, 0) };
    if n == 2 {
        u16::from_ne_bytes(b)
    } else {
        // Only unpredictability suffers; answers are still matched on the question.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        (std::process::id() ^ t).to_ne_bytes()[0..2]
            .try_into()
            .map_or(0, u16::from_ne_bytes)
    }
}

pub fn encode_query(id: u16, name: &str, qtype: u16) -> Result<Vec<u8>, String> {
    let mut q = Vec::with_capacity(512);
    for v in [id, FLAG_RECURSION_DESIRED, 1, 0, 0, 0] {
        q.extend_from_slice(&v.to_be_bytes());
    }
    let name = name.trim_end_matches('.');
    if name.is_empty() || name.len() > 253 {
        return Err(format!("'{name}' is not a valid host name"));
    }
    for label in name.split('.') {
        let len = u8::try_from(label.len())
            .ok()
            .filter(|l| (1..=63).contains(l))
            .ok_or_else(|| format!("'{name}' is not a valid host name"))?;
        q.push(len);
        q.extend_from_slice(label.as_bytes());
    }
    q.push(0);
    q.extend_from_slice(&qtype.to_be_bytes());
    q.extend_from_slice(&CLASS_IN.to_be_bytes());
    Ok(q)
}

#[derive(Debug, PartialEq, Eq)]
pub enum Parsed {
    Records(Vec<Record>),
    Truncated,
}

#[derive(Debug, PartialEq, Eq)]
pub enum Mismatch {
    /// Not an answer to this question: keep waiting.
    NotOurs,
    /// The answer to this question, but an error or malformed.
    Bad(String),
}

struct Reader<'a> {
    msg: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        let s = self
            .msg
            .get(self.at..self.at + n)
            .ok_or("answer cut short")?;
        self.at += n;
        Ok(s)
    }

    fn u16(&mut self) -> Result<u16, String> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    fn u32(&mut self) -> Result<u32, String> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A possibly compressed name at the cursor, lowercased, without the final dot.
    fn name(&mut self) -> Result<String, String> {
        let (name, next) = read_name(self.msg, self.at)?;
        self.at = next;
        Ok(name)
    }
}

/// The name at `at` and the offset just after it (after the first pointer, if any).
fn read_name(msg: &[u8], mut at: usize) -> Result<(String, usize), String> {
    let mut out = String::new();
    let mut after = None;
    for _ in 0..128 {
        let len = *msg.get(at).ok_or("answer cut short")?;
        match len {
            0 => {
                return Ok((out, after.unwrap_or(at + 1)));
            }
            l if l & 0xc0 == 0xc0 => {
                let lo = *msg.get(at + 1).ok_or("answer cut short")?;
                after.get_or_insert(at + 2);
                at = usize::from(u16::from_be_bytes([l & 0x3f, lo]));
            }
            l if l & 0xc0 == 0 => {
                let label = msg
                    .get(at + 1..at + 1 + usize::from(l))
                    .ok_or("answer cut short")?;
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(&String::from_utf8_lossy(label).to_ascii_lowercase());
                if out.len() > 255 {
                    return Err("name too long".into());
                }
                at += 1 + usize::from(l);
            }
            _ => return Err("unknown label type".into()),
        }
    }
    Err("name compression loop".into())
}

/// owner, type, class, TTL, data, offset of the data in the message.
type RawRecord = (String, u16, u16, u32, Vec<u8>, usize);

/// Checks that `msg` answers (`id`, `name`, `qtype`) and returns the addresses of `name`,
/// following CNAMEs inside the answer section.
pub fn parse_answer(msg: &[u8], id: u16, name: &str, qtype: u16) -> Result<Parsed, Mismatch> {
    let mut r = Reader { msg, at: 0 };
    let header = (|| -> Result<[u16; 6], String> {
        Ok([r.u16()?, r.u16()?, r.u16()?, r.u16()?, r.u16()?, r.u16()?])
    })()
    .map_err(|_| Mismatch::NotOurs)?;
    let [got_id, flags, qd, an, _, _] = header;
    if got_id != id || flags & FLAG_RESPONSE == 0 || qd != 1 {
        return Err(Mismatch::NotOurs);
    }
    let want = name.trim_end_matches('.').to_ascii_lowercase();
    let question =
        (|| -> Result<(String, u16, u16), String> { Ok((r.name()?, r.u16()?, r.u16()?)) })()
            .map_err(|_| Mismatch::NotOurs)?;
    if question != (want.clone(), qtype, CLASS_IN) {
        return Err(Mismatch::NotOurs);
    }
    if flags & FLAG_TRUNCATED != 0 {
        return Ok(Parsed::Truncated);
    }
    match flags & 0xf {
        0 => {}
        RCODE_NXDOMAIN => return Ok(Parsed::Records(Vec::new())),
        rcode => return Err(Mismatch::Bad(format!("server error (rcode {rcode})"))),
    }
    let mut records = Vec::new();
    for _ in 0..an {
        let rec = (|| -> Result<RawRecord, String> {
            let owner = r.name()?;
            let (t, class, ttl) = (r.u16()?, r.u16()?, r.u32()?);
            let len = usize::from(r.u16()?);
            let start = r.at;
            let data = r.take(len)?.to_vec();
            Ok((owner, t, class, ttl, data, start))
        })()
        .map_err(Mismatch::Bad)?;
        records.push(rec);
    }
    // Follow the CNAME chain from the question (records may come in any order).
    let mut chain = vec![(want, u32::MAX)];
    for _ in 0..16 {
        let (tail, ttl) = chain.last().cloned().expect("non-empty");
        let next = records
            .iter()
            .find_map(|(owner, t, class, rttl, _, start)| {
                (*t == TYPE_CNAME && *class == CLASS_IN && *owner == tail)
                    .then(|| read_name(msg, *start).map(|(n, _)| (n, ttl.min(*rttl))))
            });
        match next {
            Some(Ok(n)) if !chain.iter().any(|(c, _)| *c == n.0) => chain.push(n),
            Some(Err(e)) => return Err(Mismatch::Bad(e)),
            _ => break,
        }
    }
    let mut out = Vec::new();
    for (owner, t, class, ttl, data, _) in &records {
        let Some((_, chain_ttl)) = chain.iter().find(|(c, _)| c == owner) else {
            continue;
        };
        if *class != CLASS_IN || *t != qtype {
            continue;
        }
        let addr = match (*t, data.len()) {
            (TYPE_A, 4) => IpAddr::from(<[u8; 4]>::try_from(data.as_slice()).expect("4")),
            (TYPE_AAAA, 16) => IpAddr::from(<[u8; 16]>::try_from(data.as_slice()).expect("16")),
            _ => continue,
        };
        out.push(Record {
            addr,
            ttl: (*ttl).min(*chain_ttl),
        });
    }
    Ok(Parsed::Records(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A response to `query` with the given answer records (owner offset 12 = the
    /// question's name, compressed).
    fn response(query: &[u8], flags: u16, answers: &[(&[u8], u16, u32, &[u8])]) -> Vec<u8> {
        let mut m = query.to_vec();
        m[2..4].copy_from_slice(&(FLAG_RESPONSE | flags).to_be_bytes());
        m[6..8].copy_from_slice(&(answers.len() as u16).to_be_bytes());
        for (owner, t, ttl, data) in answers {
            m.extend_from_slice(owner);
            m.extend_from_slice(&t.to_be_bytes());
            m.extend_from_slice(&CLASS_IN.to_be_bytes());
            m.extend_from_slice(&ttl.to_be_bytes());
            m.extend_from_slice(&(data.len() as u16).to_be_bytes());
            m.extend_from_slice(data);
        }
        m
    }

    const Q: &[u8] = &[0xc0, 12];

    #[test]
    fn addresses_with_ttls_through_a_cname_chain() {
        let q = encode_query(7, "api.Example.test", TYPE_A).unwrap();
        // api.example.test CNAME edge.cdn.test (ttl 30); edge A 1.2.3.4 (ttl 300), plus an
        // unrelated A record that must be ignored.
        let cname = b"\x04edge\x03cdn\x04test\x00";
        let m = response(
            &q,
            0,
            &[
                (Q, TYPE_CNAME, 30, cname),
                (cname, TYPE_A, 300, &[1, 2, 3, 4]),
                (b"\x05other\x04test\x00", TYPE_A, 300, &[9, 9, 9, 9]),
            ],
        );
        assert_eq!(
            parse_answer(&m, 7, "api.example.test.", TYPE_A),
            Ok(Parsed::Records(vec![Record {
                addr: "1.2.3.4".parse().unwrap(),
                ttl: 30
            }]))
        );
    }

    #[test]
    fn answers_to_other_questions_are_ignored() {
        let q = encode_query(7, "a.test", TYPE_A).unwrap();
        let m = response(&q, 0, &[(Q, TYPE_A, 5, &[1, 1, 1, 1])]);
        assert_eq!(
            parse_answer(&m, 8, "a.test", TYPE_A),
            Err(Mismatch::NotOurs)
        );
        assert_eq!(
            parse_answer(&m, 7, "b.test", TYPE_A),
            Err(Mismatch::NotOurs)
        );
        assert_eq!(
            parse_answer(&m, 7, "a.test", TYPE_AAAA),
            Err(Mismatch::NotOurs)
        );
        assert_eq!(
            parse_answer(&q, 7, "a.test", TYPE_A),
            Err(Mismatch::NotOurs)
        );
    }

    #[test]
    fn truncation_nxdomain_and_malformed_answers() {
        let q = encode_query(1, "a.test", TYPE_AAAA).unwrap();
        let tc = response(&q, FLAG_TRUNCATED, &[]);
        assert_eq!(
            parse_answer(&tc, 1, "a.test", TYPE_AAAA),
            Ok(Parsed::Truncated)
        );
        let nx = response(&q, RCODE_NXDOMAIN, &[]);
        assert_eq!(
            parse_answer(&nx, 1, "a.test", TYPE_AAAA),
            Ok(Parsed::Records(vec![]))
        );
        let mut cut = response(&q, 0, &[(Q, TYPE_AAAA, 5, &[0; 16])]);
        cut.truncate(cut.len() - 3);
        assert!(matches!(
            parse_answer(&cut, 1, "a.test", TYPE_AAAA),
            Err(Mismatch::Bad(_))
        ));
        // A compression pointer to itself.
        let looped = response(&q, 0, &[(&[0xc0, 0x18], TYPE_AAAA, 5, &[0; 16])]);
        let at = looped.len() - 16 - 10 - 2;
        let mut looped = looped;
        looped[at..at + 2].copy_from_slice(&[0xc0, at as u8]);
        assert!(parse_answer(&looped, 1, "a.test", TYPE_AAAA).is_err());
        // Every prefix of a valid answer is rejected or ignored, never a panic.
        let ok = response(&q, 0, &[(Q, TYPE_AAAA, 5, &[0; 16])]);
        for n in 0..ok.len() {
            let _ = parse_answer(&ok[..n], 1, "a.test", TYPE_AAAA);
        }
    }

    #[test]
    fn bad_names_are_refused() {
        assert!(encode_query(1, "", TYPE_A).is_err());
        assert!(encode_query(1, "a..b", TYPE_A).is_err());
        assert!(encode_query(1, &"x".repeat(64), TYPE_A).is_err());
    }
}
