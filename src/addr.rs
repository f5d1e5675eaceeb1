//! Server addresses: `redis://[[user]:password@]host[:port][/db]`,
//! `rediss://…` (TLS, with the `tls` feature) and
//! `unix:///path/to/redis.sock[?db=N&user=U&pass=P]`.

use std::fmt;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::str::FromStr;

/// Where a server listens.
///
/// ```
/// use redlock_mio::{Endpoint, ServerAddr};
///
/// let addr = ServerAddr::parse("redis://127.0.0.1:7000")?;
/// match addr.endpoint() {
///     Endpoint::Tcp(socket) => assert_eq!(socket.port(), 7000),
///     Endpoint::Unix(path) => println!("socket file {}", path.display()),
/// }
/// assert!(addr.endpoint().is_local());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Endpoint {
    /// TCP, resolved when the address was parsed.
    Tcp(SocketAddr),
    /// A Unix domain socket.
    Unix(PathBuf),
}

impl Endpoint {
    /// Whether the server runs on this machine: a loopback address
    /// (`127.0.0.0/8`, `::1`, or `::ffff:127.x.y.z`) or a Unix socket.
    pub fn is_local(&self) -> bool {
        match self {
            Endpoint::Tcp(addr) => addr.ip().to_canonical().is_loopback(),
            Endpoint::Unix(_) => true,
        }
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Tcp(addr) => write!(f, "redis://{addr}"),
            Endpoint::Unix(path) => write!(f, "unix://{}", path.display()),
        }
    }
}

/// Why a server address was refused. Never contains the password.
///
/// ```
/// use redlock_mio::{AddrError, ServerAddr};
///
/// assert_eq!(ServerAddr::parse("redis://127.0.0.1:99999"), Err(AddrError::InvalidPort));
/// assert_eq!(ServerAddr::parse("http://127.0.0.1"), Err(AddrError::UnsupportedScheme));
/// if let Err(error) = ServerAddr::parse("redis://:hunter2@127.0.0.1:6379/x") {
///     assert!(!error.to_string().contains("hunter2"));
/// }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum AddrError {
    /// The scheme is not `redis://` or `unix://` (or is `unix://` on a
    /// system without Unix sockets).
    UnsupportedScheme,
    /// `rediss://` in a build without the `tls` feature.
    TlsUnsupported,
    /// No host in a `redis://` address, or no path in a `unix://` one.
    MissingHost,
    /// The port is not a number from 1 to 65535.
    InvalidPort,
    /// The database is not a number.
    InvalidDb,
    /// A percent-escape in the user or password is malformed.
    InvalidEscape,
    /// Something after the host that is not `/db`, or an unknown query key.
    Unexpected,
    /// The host name did not resolve.
    Resolve {
        /// The host name.
        host: String,
        /// What the resolver said.
        message: String,
    },
}

impl fmt::Display for AddrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AddrError::UnsupportedScheme if cfg!(unix) => f.write_str(
                "unsupported scheme: use redis://[[user]:password@]host[:port][/db], \
                 rediss://… (TLS) or unix:///path/to/redis.sock[?db=N&user=U&pass=P]",
            ),
            AddrError::UnsupportedScheme => f.write_str(
                "unsupported scheme: use redis://[[user]:password@]host[:port][/db] \
                 or rediss://… (TLS); unix:// needs a Unix system",
            ),
            AddrError::TlsUnsupported => f.write_str(
                "rediss:// (TLS) needs the crate's `tls` feature: build with \
                 features = [\"tls\"], or use redis:// or unix://",
            ),
            AddrError::MissingHost => f.write_str("no host or socket path"),
            AddrError::InvalidPort => f.write_str("port must be a number from 1 to 65535"),
            AddrError::InvalidDb => f.write_str("database must be a non-negative number"),
            AddrError::InvalidEscape => f.write_str("malformed percent-escape"),
            AddrError::Unexpected => f.write_str("unexpected text after the host"),
            AddrError::Resolve { host, message } => {
                write!(f, "host name {host:?} did not resolve: {message}")
            }
        }
    }
}

impl std::error::Error for AddrError {}

/// One Redis master: where it listens and how to log in.
///
/// `Debug` and `Display` never show the password.
///
/// [`Redlock::builder`](crate::Redlock::builder) takes addresses as text
/// and parses them itself; `ServerAddr` is for tools that check or show an
/// address on their own.
///
/// ```
/// use redlock_mio::ServerAddr;
///
/// let addr = ServerAddr::parse("redis://locker:s3cret@127.0.0.1:7000/2")?;
/// assert_eq!((addr.user(), addr.db()), (Some("locker"), 2));
/// assert!(addr.has_password());
/// assert_eq!(addr.to_string(), "redis://locker:***@127.0.0.1:7000/2");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct ServerAddr {
    endpoint: Endpoint,
    user: Option<String>,
    password: Option<String>,
    db: u32,
    /// For `rediss://`: the host as written, the name the server's
    /// certificate must carry.
    tls_name: Option<String>,
}

impl ServerAddr {
    /// Parses and resolves an address:
    /// `redis://[[user]:password@]host[:port][/db]` (port 6379 by default),
    /// `rediss://…` (the same over TLS; needs the `tls` feature; the
    /// server's certificate must name the host as written) or
    /// `unix:///path/to/redis.sock[?db=N&user=U&pass=P]` (on Unix). A host name is
    /// resolved here, once.
    ///
    /// # Errors
    ///
    /// [`AddrError`] says what is wrong, without echoing the password.
    pub fn parse(url: &str) -> Result<ServerAddr, AddrError> {
        // Schemes are case-insensitive (RFC 3986, section 3.1).
        let (scheme, rest) = url.split_once("://").ok_or(AddrError::UnsupportedScheme)?;
        if scheme.eq_ignore_ascii_case("redis") {
            parse_tcp(rest, false)
        } else if scheme.eq_ignore_ascii_case("unix") || scheme.eq_ignore_ascii_case("redis+unix") {
            parse_unix(rest)
        } else if scheme.eq_ignore_ascii_case("rediss") {
            if cfg!(feature = "tls") {
                parse_tcp(rest, true)
            } else {
                Err(AddrError::TlsUnsupported)
            }
        } else {
            Err(AddrError::UnsupportedScheme)
        }
    }

    /// A TCP server with no password on database 0.
    pub fn tcp(addr: SocketAddr) -> ServerAddr {
        ServerAddr {
            endpoint: Endpoint::Tcp(addr),
            user: None,
            password: None,
            db: 0,
            tls_name: None,
        }
    }

    /// Whether the connection is made over TLS (`rediss://`).
    pub fn is_tls(&self) -> bool {
        self.tls_name.is_some()
    }

    /// The name the server's certificate must carry, for `rediss://`: the
    /// host as written in the address.
    pub fn tls_name(&self) -> Option<&str> {
        self.tls_name.as_deref()
    }

    /// Where the server listens.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// The ACL user, if any.
    pub fn user(&self) -> Option<&str> {
        self.user.as_deref()
    }

    /// The database number.
    pub fn db(&self) -> u32 {
        self.db
    }

    /// Whether a password is set.
    pub fn has_password(&self) -> bool {
        self.password.is_some()
    }

    /// The password, if any, for tools that open their own connections
    /// (never shown by `Debug` or `Display`).
    pub fn password(&self) -> Option<&str> {
        self.password.as_deref()
    }
}

impl FromStr for ServerAddr {
    type Err = AddrError;

    fn from_str(url: &str) -> Result<ServerAddr, AddrError> {
        ServerAddr::parse(url)
    }
}

impl fmt::Display for ServerAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.endpoint {
            Endpoint::Tcp(addr) => {
                f.write_str(if self.is_tls() {
                    "rediss://"
                } else {
                    "redis://"
                })?;
                match (&self.user, self.password.is_some()) {
                    (Some(user), true) => write!(f, "{user}:***@")?,
                    (None, true) => f.write_str(":***@")?,
                    (Some(user), false) => write!(f, "{user}@")?,
                    (None, false) => {}
                }
                write!(f, "{addr}")?;
                if self.db != 0 {
                    write!(f, "/{}", self.db)?;
                }
                Ok(())
            }
            Endpoint::Unix(path) => write!(f, "unix://{}", path.display()),
        }
    }
}

impl fmt::Debug for ServerAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ServerAddr({self})")
    }
}

fn parse_tcp(rest: &str, tls: bool) -> Result<ServerAddr, AddrError> {
    let (auth, rest) = match rest.rsplit_once('@') {
        Some((auth, rest)) => (Some(auth), rest),
        None => (None, rest),
    };
    let (hostport, db) = match rest.split_once('/') {
        Some((hostport, "")) => (hostport, 0),
        Some((hostport, db)) => (hostport, db.parse().map_err(|_| AddrError::InvalidDb)?),
        None => (rest, 0),
    };
    let (host, port) = split_host_port(hostport)?;
    if host.is_empty() {
        return Err(AddrError::MissingHost);
    }
    let endpoint = match host.parse::<IpAddr>() {
        Ok(ip) => Endpoint::Tcp(SocketAddr::new(ip, port)),
        Err(_) => {
            let mut addrs = (host, port)
                .to_socket_addrs()
                .map_err(|e| AddrError::Resolve {
                    host: host.to_owned(),
                    message: e.to_string(),
                })?;
            let addr = addrs.next().ok_or_else(|| AddrError::Resolve {
                host: host.to_owned(),
                message: "no address".to_owned(),
            })?;
            Endpoint::Tcp(addr)
        }
    };
    let (user, password) = match auth {
        None => (None, None),
        Some(auth) => {
            let (user, password) = match auth.split_once(':') {
                Some((user, password)) => (user, Some(password)),
                None => (auth, None),
            };
            let user = Some(percent_decode(user)?).filter(|u| !u.is_empty());
            let password = password.map(percent_decode).transpose()?;
            (user, password)
        }
    };
    Ok(ServerAddr {
        endpoint,
        user,
        password,
        db,
        tls_name: tls.then(|| host.to_owned()),
    })
}

/// Splits `host[:port]`, with IPv6 hosts in brackets; the port defaults to
/// 6379.
fn split_host_port(hostport: &str) -> Result<(&str, u16), AddrError> {
    let (host, port) = if let Some(rest) = hostport.strip_prefix('[') {
        let (host, after) = rest.split_once(']').ok_or(AddrError::MissingHost)?;
        match after {
            "" => (host, None),
            _ => (
                host,
                Some(after.strip_prefix(':').ok_or(AddrError::Unexpected)?),
            ),
        }
    } else {
        match hostport.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (hostport, None),
        }
    };
    let port = match port {
        None => 6379,
        Some(text) => match text.parse::<u16>() {
            Ok(port) if port != 0 && text.bytes().all(|b| b.is_ascii_digit()) => port,
            _ => return Err(AddrError::InvalidPort),
        },
    };
    Ok((host, port))
}

fn parse_unix(rest: &str) -> Result<ServerAddr, AddrError> {
    let (path, query) = match rest.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (rest, None),
    };
    if path.is_empty() {
        return Err(AddrError::MissingHost);
    }
    let mut addr = ServerAddr {
        endpoint: Endpoint::Unix(PathBuf::from(path)),
        user: None,
        password: None,
        db: 0,
        tls_name: None,
    };
    for pair in query.into_iter().flat_map(|q| q.split('&')) {
        let (key, value) = pair.split_once('=').ok_or(AddrError::Unexpected)?;
        match key {
            "db" => addr.db = value.parse().map_err(|_| AddrError::InvalidDb)?,
            "user" => addr.user = Some(percent_decode(value)?),
            "pass" | "password" => addr.password = Some(percent_decode(value)?),
            _ => return Err(AddrError::Unexpected),
        }
    }
    // Checked after the rest, so that a malformed address gets the same
    // error everywhere.
    if cfg!(unix) {
        Ok(addr)
    } else {
        Err(AddrError::UnsupportedScheme)
    }
}

fn percent_decode(text: &str) -> Result<String, AddrError> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3).ok_or(AddrError::InvalidEscape)?;
            let hex = std::str::from_utf8(hex).map_err(|_| AddrError::InvalidEscape)?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| AddrError::InvalidEscape)?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| AddrError::InvalidEscape)
}

#[cfg(test)]
mod tests {
    #[test]
    fn endpoints_on_this_machine_are_local() {
        let cases = [
            ("127.0.0.1:6379", true),
            ("127.3.2.1:1", true),
            ("[::1]:6379", true),
            ("[::ffff:127.0.0.1]:6379", true),
            ("10.0.0.1:6379", false),
            ("192.168.1.2:6379", false),
            ("[2001:db8::1]:6379", false),
            ("[::ffff:10.0.0.1]:6379", false),
            ("0.0.0.0:6379", false),
        ];
        for (addr, local) in cases {
            let endpoint = Endpoint::Tcp(addr.parse().unwrap_or_else(|e| panic!("{addr}: {e}")));
            assert_eq!(endpoint.is_local(), local, "{addr}");
        }
        assert!(Endpoint::Unix("/tmp/redis.sock".into()).is_local());
    }

    use super::*;

    fn tcp(url: &str) -> (SocketAddr, Option<String>, Option<String>, u32) {
        let addr = ServerAddr::parse(url).unwrap_or_else(|e| panic!("{url}: {e}"));
        let Endpoint::Tcp(sock) = addr.endpoint else {
            panic!("{url} is not TCP")
        };
        (sock, addr.user, addr.password, addr.db)
    }

    #[test]
    fn tcp_forms() {
        let local = |port| SocketAddr::from(([127, 0, 0, 1], port));
        assert_eq!(tcp("redis://127.0.0.1:7000"), (local(7000), None, None, 0));
        assert_eq!(tcp("redis://127.0.0.1"), (local(6379), None, None, 0));
        assert_eq!(tcp("REDIS://127.0.0.1"), (local(6379), None, None, 0));
        assert_eq!(tcp("Redis://127.0.0.1:7000"), (local(7000), None, None, 0));
        assert_eq!(tcp("redis://127.0.0.1:7000/"), (local(7000), None, None, 0));
        assert_eq!(
            tcp("redis://:s%40cret@127.0.0.1:7000/3"),
            (local(7000), None, Some("s@cret".into()), 3)
        );
        assert_eq!(
            tcp("redis://alice:pw@127.0.0.1:7000"),
            (local(7000), Some("alice".into()), Some("pw".into()), 0)
        );
        assert_eq!(
            tcp("redis://[::1]:7000").0,
            "[::1]:7000".parse().ok().unwrap_or(local(0))
        );
        assert_eq!(tcp("redis://[::1]").0.port(), 6379);
        assert!(tcp("redis://localhost:7000").0.ip().is_loopback());
    }

    #[test]
    fn tls_forms() {
        let parsed = ServerAddr::parse("rediss://u:pw@localhost:7000/1");
        if cfg!(feature = "tls") {
            let addr = parsed.unwrap_or_else(|e| panic!("{e}"));
            assert!(addr.is_tls());
            assert_eq!(addr.tls_name(), Some("localhost"));
            assert_eq!(addr.db, 1);
            let shown = addr.to_string();
            assert!(
                shown.starts_with("rediss://u:***@") && !shown.contains("pw"),
                "{shown}"
            );
            let v6 = ServerAddr::parse("rediss://[::1]:7000").unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(v6.tls_name(), Some("::1"));
        } else {
            assert_eq!(parsed, Err(AddrError::TlsUnsupported));
        }
        assert!(!ServerAddr::parse("redis://127.0.0.1:7000").is_ok_and(|a| a.is_tls()));
    }

    #[cfg(unix)]
    #[test]
    fn unix_forms() {
        let addr = ServerAddr::parse("unix:///tmp/r.sock?db=2&pass=p%26w&user=bob")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(addr.endpoint, Endpoint::Unix("/tmp/r.sock".into()));
        assert_eq!(
            (addr.db, addr.user(), addr.password()),
            (2, Some("bob"), Some("p&w"))
        );
        assert!(ServerAddr::parse("redis+unix:///tmp/r.sock").is_ok());
        assert!(ServerAddr::parse("UNIX:///tmp/r.sock").is_ok());
    }

    #[test]
    fn bad_addresses() {
        for (url, error) in [
            ("http://127.0.0.1:7000", AddrError::UnsupportedScheme),
            ("127.0.0.1:7000", AddrError::UnsupportedScheme),
            ("", AddrError::UnsupportedScheme),
            ("redis://", AddrError::MissingHost),
            ("redis://:7000", AddrError::MissingHost),
            ("redis://127.0.0.1:0", AddrError::InvalidPort),
            ("redis://127.0.0.1:65536", AddrError::InvalidPort),
            ("redis://127.0.0.1:-1", AddrError::InvalidPort),
            ("redis://127.0.0.1:+80", AddrError::InvalidPort),
            ("redis://127.0.0.1:", AddrError::InvalidPort),
            ("redis://127.0.0.1:7000/x", AddrError::InvalidDb),
            ("redis://127.0.0.1:7000/-1", AddrError::InvalidDb),
            ("redis://[::1:7000", AddrError::MissingHost),
            ("redis://[::1]x", AddrError::Unexpected),
            ("redis://:pw%zz@127.0.0.1", AddrError::InvalidEscape),
            ("unix://", AddrError::MissingHost),
            ("unix:///tmp/s?verbose=1", AddrError::Unexpected),
            ("unix:///tmp/s?db", AddrError::Unexpected),
        ] {
            assert_eq!(ServerAddr::parse(url), Err(error), "{url}");
        }
    }

    #[test]
    fn password_never_shown() {
        let addr = ServerAddr::parse("redis://alice:hunter2@127.0.0.1:7000/1")
            .unwrap_or_else(|e| panic!("{e}"));
        let shown = format!("{addr} {addr:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert_eq!(addr.to_string(), "redis://alice:***@127.0.0.1:7000/1");
        let error = ServerAddr::parse("redis://alice:hunter2@127.0.0.1:99999").err();
        assert!(!format!("{error:?}").contains("hunter2"));
    }
}
