//! `redlock status`: what each master holds for a resource, read over
//! short-lived connections of its own (`GET` and `PTTL`, pipelined), with
//! the library's RESP codec.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::time::Duration;

use redlock_mio::resp::{Arg, Decoder, Status, Token, encode_command};
use redlock_mio::rustls::pki_types::ServerName;
use redlock_mio::rustls::{ClientConnection, StreamOwned};
use redlock_mio::{Endpoint, ServerAddr};

const TIMEOUT: Duration = Duration::from_secs(2);

/// What one master holds for the resource.
#[derive(Debug, PartialEq, Eq)]
enum Holding {
    Free,
    Held { value: Vec<u8>, pttl_ms: i64 },
}

/// Prints one line per master; returns the exit status: 0 if a quorum
/// holds the key (with `token`, that token), 1 if not; if fewer than a
/// quorum answered, 78 when the masters that refuse the login (wrong
/// password, missing ACL permission) leave too few for a quorum, else 69.
pub(crate) fn show(
    urls: &[String],
    resource: &str,
    token: Option<&str>,
    tls: Option<&super::tls::Config>,
) -> u8 {
    let token = match token.map(unhex).transpose() {
        Ok(token) => token,
        Err(e) => {
            eprintln!("redlock: --token: {e}");
            return super::EX_USAGE;
        }
    };
    let quorum = urls.len() / 2 + 1;
    let (mut answered, mut holding, mut refused) = (0, 0, 0);
    for (index, url) in urls.iter().enumerate() {
        let addr = match ServerAddr::parse(url) {
            Ok(addr) => addr,
            Err(e) => {
                // The address may hold a password: named by its place.
                println!("server #{index}: bad address: {e}");
                continue;
            }
        };
        match query(&addr, resource.as_bytes(), tls) {
            Ok(Holding::Free) => {
                answered += 1;
                println!("{addr}: free");
            }
            Ok(Holding::Held { value, pttl_ms }) => {
                answered += 1;
                let ttl = if pttl_ms >= 0 {
                    format!("{pttl_ms} ms left")
                } else {
                    "no TTL".to_owned()
                };
                let owner = match &token {
                    Some(t) if *t == value => {
                        holding += 1;
                        "the given token"
                    }
                    Some(_) => "another token",
                    None => {
                        holding += 1;
                        "a token"
                    }
                };
                println!("{addr}: held by {owner}, {ttl}");
            }
            Err(e) => {
                if e.kind() == io::ErrorKind::PermissionDenied {
                    refused += 1;
                }
                println!("{addr}: {e}");
            }
        }
    }
    if urls.len() - refused < quorum {
        super::EX_CONFIG
    } else if answered < quorum {
        super::EX_UNAVAILABLE
    } else if holding >= quorum {
        0
    } else {
        1
    }
}

fn unhex(text: &str) -> Result<Vec<u8>, String> {
    if text.len() % 2 != 0 {
        return Err("an even number of hex digits is needed".to_owned());
    }
    (0..text.len())
        .step_by(2)
        .map(|i| {
            text.get(i..i + 2)
                .and_then(|pair| u8::from_str_radix(pair, 16).ok())
                .ok_or_else(|| format!("{text:?} is not hex"))
        })
        .collect()
}

trait Stream: Read + Write {}
impl<T: Read + Write> Stream for T {}

fn connect(addr: &ServerAddr, tls: Option<&super::tls::Config>) -> io::Result<Box<dyn Stream>> {
    Ok(match addr.endpoint() {
        Endpoint::Tcp(socket) => {
            let stream = TcpStream::connect_timeout(socket, TIMEOUT)?;
            stream.set_read_timeout(Some(TIMEOUT))?;
            stream.set_write_timeout(Some(TIMEOUT))?;
            match (addr.tls_name(), tls) {
                (None, _) => Box::new(stream),
                (Some(name), Some(config)) => {
                    let name = ServerName::try_from(name.to_owned())
                        .map_err(|e| io::Error::other(format!("server name: {e}")))?;
                    let session = ClientConnection::new(config.clone(), name)
                        .map_err(|e| io::Error::other(format!("TLS: {e}")))?;
                    Box::new(StreamOwned::new(session, stream))
                }
                (Some(_), None) => {
                    return Err(io::Error::other(
                        "status over TLS needs --ca-file (the CA that signed the servers)",
                    ));
                }
            }
        }
        Endpoint::Unix(path) => {
            let stream = UnixStream::connect(path)?;
            stream.set_read_timeout(Some(TIMEOUT))?;
            stream.set_write_timeout(Some(TIMEOUT))?;
            Box::new(stream)
        }
    })
}

/// `AUTH`/`SELECT` as needed, then `GET` and `PTTL`, in one write.
fn query(
    addr: &ServerAddr,
    resource: &[u8],
    tls: Option<&super::tls::Config>,
) -> io::Result<Holding> {
    let mut stream = connect(addr, tls)?;
    let mut out = Vec::new();
    let mut replies = 2;
    if let Some(password) = addr.password() {
        match addr.user() {
            Some(user) => encode_command(&mut out, &["AUTH".into(), user.into(), password.into()]),
            None => encode_command(&mut out, &["AUTH".into(), password.into()]),
        }
        replies += 1;
    }
    if addr.db() != 0 {
        encode_command(&mut out, &["SELECT".into(), addr.db().into()]);
        replies += 1;
    }
    encode_command(&mut out, &["GET".into(), Arg::Bytes(resource)]);
    encode_command(&mut out, &["PTTL".into(), Arg::Bytes(resource)]);
    stream.write_all(&out)?;

    let mut decoder = Decoder::new();
    let mut input = Vec::new();
    let mut chunk = [0u8; 4096];
    let mut answers: Vec<Answer> = Vec::new();
    while answers.len() < replies {
        loop {
            match decoder.decode(&input) {
                Ok(Status::Complete(item)) => {
                    let answer = match item.token {
                        Token::Bulk(value) => Answer::Bytes(value.to_vec()),
                        Token::Simple(_) => Answer::Ok,
                        Token::Integer(n) => Answer::Int(n),
                        Token::Null(_) => Answer::Nil,
                        Token::Error(message) => {
                            // A refused login or permission: the
                            // configuration, not the server's state.
                            let code = message.split(|&b| b == b' ').next().unwrap_or(&[]);
                            let kind = match code {
                                b"WRONGPASS" | b"NOAUTH" | b"NOPERM" => {
                                    io::ErrorKind::PermissionDenied
                                }
                                _ => io::ErrorKind::Other,
                            };
                            return Err(io::Error::new(
                                kind,
                                format!("server error: {}", String::from_utf8_lossy(message)),
                            ));
                        }
                        _ => return Err(io::Error::other("unexpected reply")),
                    };
                    let len = item.len;
                    input.drain(..len);
                    answers.push(answer);
                }
                Ok(Status::Partial) => break,
                Err(e) => return Err(io::Error::other(format!("protocol error: {e}"))),
            }
        }
        if answers.len() >= replies {
            break;
        }
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Err(io::Error::other("connection closed"));
        }
        input.extend_from_slice(&chunk[..n]);
    }
    let pttl_ms = match answers.pop() {
        Some(Answer::Int(n)) => n,
        _ => return Err(io::Error::other("unexpected PTTL reply")),
    };
    match answers.pop() {
        Some(Answer::Nil) => Ok(Holding::Free),
        Some(Answer::Bytes(value)) => Ok(Holding::Held { value, pttl_ms }),
        _ => Err(io::Error::other("unexpected GET reply")),
    }
}

enum Answer {
    Ok,
    Nil,
    Int(i64),
    Bytes(Vec<u8>),
}
