//! A small DNS stub client, for one purpose: the addresses of an `allow_hosts` name *and how
//! long each may be used* (its TTL), which `getaddrinfo` does not tell. It asks the host's
//! nameservers for A and AAAA records, follows the CNAME chain inside the answer, falls back
//! to TCP when the answer is truncated, and takes the smallest TTL along the chain.
//!
//! An answer is untrusted input: it is decoded by hickory-proto's message parser (bounds,
//! compression pointers and loops, record data), and only then matched to the question.
//! The query (a header and one question) is still written here.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use hickory_proto::op::{Header, Message, MessageType, Query, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA, CNAME};
use hickory_proto::rr::{DNSClass, Name, RData};
use hickory_proto::serialize::binary::{BinDecodable, BinDecoder};

const TYPE_A: u16 = 1;
const TYPE_AAAA: u16 = 28;
const CLASS_IN: u16 = 1;
const FLAG_RECURSION_DESIRED: u16 = 0x0100;

/// One address and the seconds it may be used for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    pub addr: IpAddr,
    pub ttl: u32,
}

/// A and AAAA records of `name` from the first of `servers` that answers. `Ok(vec![])`
/// when the name exists without addresses or does not exist (NXDOMAIN). `timeout` is the
/// time each exchange (one question to one server, UDP and TCP) may take in all.
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

/// One question to one server: UDP, then TCP if the answer was truncated, all within
/// `timeout` (one deadline for the whole exchange, not for each read: a server that sends
/// an answer a byte at a time does not hold a lookup round open).
fn exchange(
    server: SocketAddr,
    name: &str,
    qtype: u16,
    timeout: Duration,
) -> Result<Vec<Record>, String> {
    let deadline = Instant::now() + timeout;
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
            Ok(Parsed::Truncated) => {
                return exchange_tcp(server, &query, id, name, qtype, deadline);
            }
            Err(Mismatch::NotOurs) => {}
            Err(Mismatch::Bad(e)) => return Err(e),
        }
    }
}

/// The question over TCP, answered by `deadline`.
fn exchange_tcp(
    server: SocketAddr,
    query: &[u8],
    id: u16,
    name: &str,
    qtype: u16,
    deadline: Instant,
) -> Result<Vec<Record>, String> {
    let mut s = TcpStream::connect_timeout(&server, left(deadline)?).map_err(|e| e.to_string())?;
    let len = u16::try_from(query.len()).map_err(|_| "query too long")?;
    let mut msg = len.to_be_bytes().to_vec();
    msg.extend_from_slice(query);
    s.set_write_timeout(Some(left(deadline)?))
        .map_err(|e| e.to_string())?;
    s.write_all(&msg).map_err(|e| match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => "no answer".into(),
        _ => e.to_string(),
    })?;
    let mut len = [0u8; 2];
    read_by(&mut s, &mut len, deadline)?;
    let mut buf = vec![0u8; usize::from(u16::from_be_bytes(len))];
    read_by(&mut s, &mut buf, deadline)?;
    match parse_answer(&buf, id, name, qtype) {
        Ok(Parsed::Records(r)) => Ok(r),
        Ok(Parsed::Truncated) => Err("truncated answer over TCP".into()),
        Err(Mismatch::NotOurs) => Err("answer to another question".into()),
        Err(Mismatch::Bad(e)) => Err(e),
    }
}

/// The time left until `deadline`; an error once it has passed.
fn left(deadline: Instant) -> Result<Duration, String> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err("no answer".into());
    }
    Ok(left)
}

/// Fills `buf` from `s`, by `deadline` (each read waits only for the time left).
fn read_by(s: &mut TcpStream, buf: &mut [u8], deadline: Instant) -> Result<(), String> {
    let mut filled = 0;
    while filled < buf.len() {
        s.set_read_timeout(Some(left(deadline)?))
            .map_err(|e| e.to_string())?;
        match s.read(&mut buf[filled..]) {
            Ok(0) => return Err("connection closed before the whole answer".into()),
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err("no answer".into());
            }
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(())
}

fn random_id() -> u16 {
    if let Ok(b) = crate::sys::random::<2>() {
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

/// The owner name as compared here: lowercase ASCII (other bytes escaped), no final dot.
fn plain(name: &Name) -> String {
    name.to_lowercase()
        .to_ascii()
        .trim_end_matches('.')
        .to_owned()
}

/// Checks that `msg` answers (`id`, `name`, `qtype`) and returns the addresses of `name`,
/// following CNAMEs inside the answer section.
///
/// The message is decoded by hickory-proto (bounds, compression pointers, record data):
/// first the header and the question, to tell an answer to this question from anything
/// else, then (unless truncated, when the rest may be cut) the whole message.
pub fn parse_answer(msg: &[u8], id: u16, name: &str, qtype: u16) -> Result<Parsed, Mismatch> {
    let mut decoder = BinDecoder::new(msg);
    let header = Header::read(&mut decoder).map_err(|_| Mismatch::NotOurs)?;
    let meta = header.metadata;
    if meta.id != id || meta.message_type != MessageType::Response || header.counts.queries != 1 {
        return Err(Mismatch::NotOurs);
    }
    let want = name.trim_end_matches('.').to_ascii_lowercase();
    let question = Query::read(&mut decoder).map_err(|_| Mismatch::NotOurs)?;
    if plain(&question.name) != want
        || u16::from(question.query_type) != qtype
        || question.query_class != DNSClass::IN
    {
        return Err(Mismatch::NotOurs);
    }
    if meta.truncation {
        return Ok(Parsed::Truncated);
    }
    match meta.response_code {
        ResponseCode::NoError => {}
        ResponseCode::NXDomain => return Ok(Parsed::Records(Vec::new())),
        rcode => {
            return Err(Mismatch::Bad(format!(
                "server error (rcode {})",
                rcode.low()
            )));
        }
    }
    let message =
        Message::from_vec(msg).map_err(|e| Mismatch::Bad(format!("malformed answer: {e}")))?;
    let answers: Vec<(String, &hickory_proto::rr::Record)> = message
        .answers
        .iter()
        .filter(|r| r.dns_class == DNSClass::IN)
        .map(|r| (plain(&r.name), r))
        .collect();
    // Follow the CNAME chain from the question (records may come in any order).
    let mut chain = vec![(want, u32::MAX)];
    for _ in 0..16 {
        let (tail, ttl) = chain.last().cloned().expect("non-empty");
        let next = answers.iter().find_map(|(owner, r)| match &r.data {
            RData::CNAME(CNAME(target)) if *owner == tail => Some((plain(target), ttl.min(r.ttl))),
            _ => None,
        });
        match next {
            Some(n) if !chain.iter().any(|(c, _)| *c == n.0) => chain.push(n),
            _ => break,
        }
    }
    let mut out = Vec::new();
    for (owner, r) in &answers {
        let Some((_, chain_ttl)) = chain.iter().find(|(c, _)| c == owner) else {
            continue;
        };
        let addr = match (&r.data, qtype) {
            (RData::A(A(a)), TYPE_A) => IpAddr::V4(*a),
            (RData::AAAA(AAAA(a)), TYPE_AAAA) => IpAddr::V6(*a),
            _ => continue,
        };
        out.push(Record {
            addr,
            ttl: r.ttl.min(*chain_ttl),
        });
    }
    Ok(Parsed::Records(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TYPE_CNAME: u16 = 5;
    const FLAG_RESPONSE: u16 = 0x8000;
    const FLAG_TRUNCATED: u16 = 0x0200;
    const RCODE_NXDOMAIN: u16 = 3;

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

    /// Hostile answers to our question: errors (or addresses of the chain only), never a
    /// panic, a hang or an allocation sized by a count the answer claims.
    #[test]
    fn hostile_answers() {
        let q = encode_query(3, "a.test", TYPE_A).unwrap();
        let bad = |m: &[u8]| matches!(parse_answer(m, 3, "a.test", TYPE_A), Err(Mismatch::Bad(_)));
        // Two compression pointers pointing at each other (owner name of the answer).
        let mut m = response(&q, 0, &[(&[0xc0, 0x00], TYPE_A, 5, &[1, 2, 3, 4])]);
        let at = q.len();
        let looped = u8::try_from(at).unwrap();
        m[at..at + 2].copy_from_slice(&[0xc0, looped + 2]);
        m.splice(at + 2..at + 2, [0xc0, looped]);
        assert!(bad(&m), "pointer loop");
        // A pointer past the end of the message, and one forward to itself.
        let mut m = response(&q, 0, &[(&[0xc0, 0xff], TYPE_A, 5, &[1, 2, 3, 4])]);
        assert!(bad(&m), "pointer past the end");
        m[at..at + 2].copy_from_slice(&[0xc0, looped]);
        assert!(bad(&m), "pointer to itself");
        // Reserved label types (0x40, 0x80).
        for t in [0x41, 0x81] {
            let m = response(&q, 0, &[(&[t, b'x', 0], TYPE_A, 5, &[1, 2, 3, 4])]);
            assert!(bad(&m), "label type {t:#x}");
        }
        // 65535 answers announced, none there.
        let mut m = response(&q, 0, &[]);
        m[6..8].copy_from_slice(&[0xff, 0xff]);
        assert!(bad(&m), "answer count larger than the message");
        // An A record whose data is not 4 bytes.
        let m = response(&q, 0, &[(Q, TYPE_A, 5, &[1, 2, 3])]);
        assert!(bad(&m), "A record of 3 bytes");
        // A name longer than 255 bytes, built from pointers to a long label.
        let mut long = Vec::new();
        for _ in 0..5 {
            long.push(63);
            long.extend_from_slice(&[b'x'; 63]);
        }
        long.push(0);
        let m = response(&q, 0, &[(&long, TYPE_A, 5, &[1, 2, 3, 4])]);
        assert!(bad(&m), "name of 320 bytes");
    }

    #[test]
    fn cname_loops_and_long_chains_end() {
        let q = encode_query(4, "a.test", TYPE_A).unwrap();
        // a -> b -> a: the chain stops where it loops; b's address is a's.
        let b = b"\x01b\x04test\x00";
        let a = b"\x01a\x04test\x00";
        let m = response(
            &q,
            0,
            &[
                (Q, TYPE_CNAME, 60, b),
                (b, TYPE_CNAME, 60, a),
                (b, TYPE_A, 600, &[5, 6, 7, 8]),
            ],
        );
        assert_eq!(
            parse_answer(&m, 4, "a.test", TYPE_A),
            Ok(Parsed::Records(vec![Record {
                addr: "5.6.7.8".parse().unwrap(),
                ttl: 60
            }]))
        );
        // A chain of 20 CNAMEs: followed for 16 links, the address at the end is not
        // reached.
        let names: Vec<Vec<u8>> = (0..=20)
            .map(|i| {
                let label = format!("n{i}");
                let mut n = vec![u8::try_from(label.len()).unwrap()];
                n.extend_from_slice(label.as_bytes());
                n.extend_from_slice(b"\x04test\x00");
                n
            })
            .collect();
        let mut answers: Vec<(&[u8], u16, u32, &[u8])> = vec![(Q, TYPE_CNAME, 60, &names[0])];
        for i in 0..20 {
            answers.push((&names[i], TYPE_CNAME, 60, &names[i + 1]));
        }
        answers.push((&names[20], TYPE_A, 60, &[9, 9, 9, 9]));
        let m = response(&q, 0, &answers);
        assert_eq!(
            parse_answer(&m, 4, "a.test", TYPE_A),
            Ok(Parsed::Records(vec![]))
        );
    }

    /// Every single-byte change of a valid answer (with a CNAME and compression) is
    /// rejected, ignored or parsed, never a panic.
    #[test]
    fn mutated_answers_never_panic() {
        let q = encode_query(9, "api.example.test", TYPE_AAAA).unwrap();
        // edge + a pointer to "example.test" in the question (offset 16).
        let cname = b"\x04edge\xc0\x10";
        // The AAAA record's owner points at the CNAME's data: 34 (the query's length) + 2
        // (owner) + 10 (type, class, TTL, length) = 46.
        assert_eq!(q.len(), 34);
        let ok = response(
            &q,
            0,
            &[
                (Q, TYPE_CNAME, 30, cname),
                (
                    &[0xc0, 46],
                    TYPE_AAAA,
                    300,
                    &[0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
                ),
            ],
        );
        assert!(matches!(
            parse_answer(&ok, 9, "api.example.test", TYPE_AAAA),
            Ok(Parsed::Records(r)) if r.len() == 1
        ));
        for i in 0..ok.len() {
            for v in [0x00, 0x01, 0x3f, 0x40, 0x7f, 0xc0, 0xff] {
                let mut m = ok.clone();
                m[i] = v;
                let _ = parse_answer(&m, 9, "api.example.test", TYPE_AAAA);
            }
        }
    }

    /// One deadline for the whole exchange: a server that answers "truncated" over UDP late,
    /// then sends the TCP answer a byte at a time (each byte well within a per-read timeout)
    /// holds the question for the exchange's time, not for hours.
    #[test]
    fn one_deadline_for_the_whole_exchange() {
        // TCP and UDP on the same port.
        let (tcp, udp) = loop {
            let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            if let Ok(udp) = UdpSocket::bind(tcp.local_addr().unwrap()) {
                break (tcp, udp);
            }
        };
        let server = tcp.local_addr().unwrap();
        std::thread::spawn(move || {
            let mut buf = [0u8; 512];
            let Ok((n, from)) = udp.recv_from(&mut buf) else {
                return;
            };
            std::thread::sleep(Duration::from_millis(400));
            let mut m = buf[..n].to_vec();
            let flags = FLAG_RESPONSE | FLAG_TRUNCATED | FLAG_RECURSION_DESIRED;
            m[2..4].copy_from_slice(&flags.to_be_bytes());
            let _ = udp.send_to(&m, from);
        });
        std::thread::spawn(move || {
            let Ok((mut c, _)) = tcp.accept() else {
                return;
            };
            // A 256-byte answer announced, then one byte every 300 ms.
            if c.write_all(&[1, 0]).is_err() {
                return;
            }
            for _ in 0..256 {
                std::thread::sleep(Duration::from_millis(300));
                if c.write_all(&[0]).is_err() {
                    return;
                }
            }
        });
        let t0 = Instant::now();
        let r = exchange(server, "a.test", TYPE_A, Duration::from_millis(1500));
        let took = t0.elapsed();
        assert_eq!(r, Err("no answer".to_owned()));
        assert!(
            took >= Duration::from_millis(1400) && took < Duration::from_secs(4),
            "the exchange took {took:?}"
        );
    }

    #[test]
    fn bad_names_are_refused() {
        assert!(encode_query(1, "", TYPE_A).is_err());
        assert!(encode_query(1, "a..b", TYPE_A).is_err());
        assert!(encode_query(1, &"x".repeat(64), TYPE_A).is_err());
    }
}
