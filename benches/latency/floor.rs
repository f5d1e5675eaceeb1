//! The physical floor: pre-encoded commands on raw non-blocking sockets.

use super::*;

/// The release script a floor sends: the crate's own (the compare-and-delete
/// and the hand-off to a waiter, if any), or the classic compare-and-delete
/// alone, so that the table shows what the hand-off costs the servers.
#[derive(Clone, Copy)]
pub(crate) enum Release {
    Crate,
    Classic,
}

/// The classic compare-and-delete of the Redlock page.
const CLASSIC_RELEASE: &str = r#"if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end"#;
/// Its SHA-1, as `SCRIPT LOAD` returns it.
const CLASSIC_RELEASE_SHA1: &str = "b70c2384248f88e6b75b9f89241a180f856ad852";

impl Release {
    fn text_and_sha1(self) -> (&'static str, &'static str) {
        match self {
            Release::Crate => (RELEASE_SCRIPT, RELEASE_SHA1),
            Release::Classic => (CLASSIC_RELEASE, CLASSIC_RELEASE_SHA1),
        }
    }
}

/// RESP encoding of a command, for the pre-encoded floor and the checker.
pub(crate) fn encode(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Variant 6: The floor: the same five `SET NX PX` and five `EVALSHA` release
/// commands, pre-encoded with a fixed token, written to every socket and
/// read back with non-blocking mio sockets, counting CRLF-terminated reply
/// lines (these replies are one line each). No lock logic. "floor (all)"
/// waits for a reply from every socket, "floor (quorum)" for the first
/// `quorum` replies; it reads the late ones in a later round, as a client
/// that decides at quorum does.
pub(crate) struct Floor {
    pub(crate) poll: mio::Poll,
    pub(crate) events: mio::Events,
    pub(crate) socks: Vec<mio::net::TcpStream>,
    /// Per socket: bytes received and not yet consumed, replies owed.
    pub(crate) bufs: Vec<([u8; 64], usize, u32)>,
    /// Replies needed to finish a round.
    pub(crate) need: usize,
    pub(crate) set: Vec<u8>,
    pub(crate) release: Vec<u8>,
}

impl Floor {
    pub(crate) fn new(
        env: &Env,
        resource: &str,
        live: &[usize],
        need: usize,
        script: Release,
    ) -> Result<Floor> {
        let poll = mio::Poll::new()?;
        let mut socks = Vec::new();
        let (text, want) = script.text_and_sha1();
        let load = encode(&[b"SCRIPT", b"LOAD", text.as_bytes()]);
        for (token, &i) in live.iter().enumerate() {
            let mut stream = TcpStream::connect_timeout(&env.addrs[i], Duration::from_secs(1))?;
            stream.set_nodelay(true)?;
            stream.set_read_timeout(Some(Duration::from_secs(2)))?;
            stream.write_all(&load)?;
            // `$40\r\n<sha>\r\n`; nothing else is sent before it is read.
            let mut reader = BufReader::new(&stream);
            let (mut line, mut sha) = (String::new(), String::new());
            reader.read_line(&mut line)?;
            if line.trim_end() == "$40" {
                reader.read_line(&mut sha)?;
            }
            drop(reader);
            if sha.trim_end() != want {
                return Err(format!("floor: SCRIPT LOAD replied {line:?} {sha:?}").into());
            }
            stream.set_nonblocking(true)?;
            let mut stream = mio::net::TcpStream::from_std(stream);
            poll.registry()
                .register(&mut stream, mio::Token(token), mio::Interest::READABLE)?;
            socks.push(stream);
        }
        let token = b"floor-fixed-token-20";
        let ttl = TTL_MS.to_string();
        let r = resource.as_bytes();
        Ok(Floor {
            poll,
            events: mio::Events::with_capacity(16),
            bufs: vec![([0; 64], 0, 0); socks.len()],
            need: need.min(socks.len()),
            socks,
            set: encode(&[b"SET", r, token, b"NX", b"PX", ttl.as_bytes()]),
            release: encode(&[b"EVALSHA", want.as_bytes(), b"1", r, token]),
        })
    }

    /// Writes `cmd` to every socket and waits until `need` sockets have
    /// returned their reply to it, which must be `expect`.
    pub(crate) fn round(
        &mut self,
        release: bool,
        expect: &[u8],
    ) -> std::result::Result<(), String> {
        let cmd = if release { &self.release } else { &self.set };
        for (sock, buf) in self.socks.iter_mut().zip(&mut self.bufs) {
            let mut written = 0;
            while written < cmd.len() {
                match sock.write(&cmd[written..]) {
                    Ok(n) => written += n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => thread::yield_now(),
                    Err(e) => return Err(e.to_string()),
                }
            }
            buf.2 += 1;
        }
        let mut done = 0;
        while done < self.need {
            self.poll
                .poll(&mut self.events, Some(Duration::from_secs(5)))
                .map_err(|e| e.to_string())?;
            if self.events.is_empty() {
                return Err(format!(
                    "floor: {} replies missing after 5 s",
                    self.need - done
                ));
            }
            for event in &self.events {
                let i = event.token().0;
                let (buf, len, owed) = &mut self.bufs[i];
                while *owed > 0 {
                    match self.socks[i].read(&mut buf[*len..]) {
                        Ok(0) => return Err("floor: connection closed".to_owned()),
                        Ok(n) => *len += n,
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(e) => return Err(e.to_string()),
                    }
                    // Consume the complete lines; the last one owed is this
                    // round's reply, earlier ones are late replies.
                    let mut at = 0;
                    while *owed > 0 {
                        let Some(end) = buf[at..*len].windows(2).position(|w| w == b"\r\n") else {
                            break;
                        };
                        let line = &buf[at..at + end + 2];
                        *owed -= 1;
                        if *owed == 0 {
                            if line != expect {
                                return Err(format!(
                                    "floor: reply {:?}",
                                    String::from_utf8_lossy(line)
                                ));
                            }
                            done += 1;
                        } else if line != b"+OK\r\n" && line != b":1\r\n" {
                            return Err(format!(
                                "floor: late reply {:?}",
                                String::from_utf8_lossy(line)
                            ));
                        }
                        at += end + 2;
                    }
                    buf.copy_within(at..*len, 0);
                    *len -= at;
                    if *len == buf.len() {
                        return Err("floor: reply too long".to_owned());
                    }
                }
            }
        }
        Ok(())
    }
}

impl Variant for Floor {
    fn acquire(&mut self) -> std::result::Result<(), String> {
        self.round(false, b"+OK\r\n")
    }

    fn release(&mut self) -> std::result::Result<(), String> {
        self.round(true, b":1\r\n")
    }
}
