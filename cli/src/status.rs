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
use redlock_mio::{NodeError, ServerError};

const TIMEOUT: Duration = Duration::from_secs(2);

/// What one master holds for the resource.
#[derive(Debug, PartialEq, Eq)]
enum Holding {
    Free,
    Held { value: Vec<u8>, pttl_ms: i64 },
}

/// Prints one line per master, a failure worded as `run` words it (the
/// library's [`NodeError`]); returns the exit status: 0 if a quorum holds
/// the key (with `token`, that token), 1 if not; if fewer than a quorum
/// answered, 78 when the masters that refuse the configuration (wrong
/// password, missing ACL permission, a refused certificate) leave too few
/// for a quorum, else 69.
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
                if e.is_configuration() {
                    refused += 1;
                }
                // Worded as `run` words it: the library's own message.
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

/// A failed read or write: a timeout is a master that does not answer.
fn io_failed(error: &io::Error) -> NodeError {
    match error.kind() {
        io::ErrorKind::WouldBlock => NodeError::Io(io::ErrorKind::TimedOut),
        kind => NodeError::Io(kind),
    }
}

fn connect(
    addr: &ServerAddr,
    tls: Option<&super::tls::Config>,
) -> Result<Box<dyn Stream>, NodeError> {
    let connect_failed = |e: io::Error| NodeError::Connect(e.kind());
    Ok(match addr.endpoint() {
        Endpoint::Tcp(socket) => {
            let stream = TcpStream::connect_timeout(socket, TIMEOUT).map_err(connect_failed)?;
            stream
                .set_read_timeout(Some(TIMEOUT))
                .and_then(|()| stream.set_write_timeout(Some(TIMEOUT)))
                .map_err(|e| io_failed(&e))?;
            match (addr.tls_name(), tls) {
                (None, _) => Box::new(stream),
                (Some(name), Some(config)) => {
                    let name = ServerName::try_from(name.to_owned())
                        .map_err(|e| NodeError::Tls(format!("server name: {e}").into()))?;
                    let session = ClientConnection::new(config.clone(), name)
                        .map_err(|e| NodeError::Tls(e.to_string().into()))?;
                    Box::new(StreamOwned::new(session, stream))
                }
                (Some(_), None) => {
                    return Err(NodeError::Tls(
                        "status over TLS needs --ca-file (the CA that signed the servers)".into(),
                    ));
                }
            }
        }
        Endpoint::Unix(path) => {
            let stream = UnixStream::connect(path).map_err(connect_failed)?;
            stream
                .set_read_timeout(Some(TIMEOUT))
                .and_then(|()| stream.set_write_timeout(Some(TIMEOUT)))
                .map_err(|e| io_failed(&e))?;
            Box::new(stream)
        }
    })
}

/// A read or write's failure: over TLS, rustls's own errors (a refused
/// certificate) come through as `InvalidData` with its message.
fn stream_failed(error: &io::Error, tls: bool) -> NodeError {
    match (error.kind(), error.get_ref()) {
        (io::ErrorKind::InvalidData, Some(inner)) if tls => {
            NodeError::Tls(inner.to_string().into())
        }
        _ => io_failed(error),
    }
}

/// `AUTH`/`SELECT` as needed, then `GET` and `PTTL`, in one write.
fn query(
    addr: &ServerAddr,
    resource: &[u8],
    tls: Option<&super::tls::Config>,
) -> Result<Holding, NodeError> {
    let mut stream = connect(addr, tls)?;
    let over_tls = addr.tls_name().is_some();
    let mut out = Vec::new();
    // Replies to the handshake's commands come first: an error there is
    // the configuration's (a password, a database number).
    let mut handshake = 0;
    if let Some(password) = addr.password() {
        match addr.user() {
            Some(user) => encode_command(&mut out, &["AUTH".into(), user.into(), password.into()]),
            None => encode_command(&mut out, &["AUTH".into(), password.into()]),
        }
        handshake += 1;
    }
    if addr.db() != 0 {
        encode_command(&mut out, &["SELECT".into(), addr.db().into()]);
        handshake += 1;
    }
    let replies = handshake + 2;
    encode_command(&mut out, &["GET".into(), Arg::Bytes(resource)]);
    encode_command(&mut out, &["PTTL".into(), Arg::Bytes(resource)]);
    stream
        .write_all(&out)
        .map_err(|e| stream_failed(&e, over_tls))?;

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
                            let error = ServerError::new(message);
                            return Err(if answers.len() < handshake {
                                NodeError::Handshake(error)
                            } else {
                                NodeError::Server(error)
                            });
                        }
                        _ => return Err(NodeError::UnexpectedReply),
                    };
                    let len = item.len;
                    input.drain(..len);
                    answers.push(answer);
                }
                Ok(Status::Partial) => break,
                Err(e) => return Err(NodeError::Protocol(e)),
            }
        }
        if answers.len() >= replies {
            break;
        }
        let n = stream
            .read(&mut chunk)
            .map_err(|e| stream_failed(&e, over_tls))?;
        if n == 0 {
            return Err(NodeError::Closed);
        }
        input.extend_from_slice(&chunk[..n]);
    }
    let pttl_ms = match answers.pop() {
        Some(Answer::Int(n)) => n,
        _ => return Err(NodeError::UnexpectedReply),
    };
    match answers.pop() {
        Some(Answer::Nil) => Ok(Holding::Free),
        Some(Answer::Bytes(value)) => Ok(Holding::Held { value, pttl_ms }),
        _ => Err(NodeError::UnexpectedReply),
    }
}

enum Answer {
    Ok,
    Nil,
    Int(i64),
    Bytes(Vec<u8>),
}
