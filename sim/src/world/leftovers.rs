//! The partial grants of failed acquires: once a client decides an acquire
//! round lost, the release its `Claim` hands back goes to every master the
//! acquire reached but those that refused it, and each of them holds no
//! key with that round's token once it has run that release.
//!
//! Three checks. A master that refused the acquire holds no key with its
//! token at the decision (the release skips it). As each master runs a
//! command, if it is the release of a failed round of the client on that
//! connection, the master holds no key with the round's token right after
//! it (a release that leaves a grant behind). At the end of the run, every
//! other master the acquire reached over a connection that was up at the
//! decision has run the release, unless that connection ended since (its
//! queued commands go with it) or the master lost its data or restarted
//! since (a restart ends its connections too): a release that never went
//! out leaves the grants to their TTL, which the check of leftovers after
//! the longest TTL cannot see.

use redlock_mio::TOKEN_LEN;
use redlock_mio::scripts::Script;

use crate::Master;

/// One acquire round its client decided as failed.
#[derive(Debug, Clone)]
pub(crate) struct Failed {
    pub(crate) client: usize,
    pub(crate) token: [u8; TOKEN_LEN],
    /// The lock's names.
    pub(crate) resources: Vec<Vec<u8>>,
    /// When the client decided it, in global time.
    pub(crate) decided: u64,
    /// The addresses its release is owed to, bit `i` for address `i`:
    /// those the acquire reached over a connection up at the decision.
    pub(crate) owed: u64,
    /// When the master at each address ran its release, by address.
    pub(crate) answered: Vec<Option<u64>>,
}

/// The failed rounds, the ends of the clients' connections, and what the
/// check found as the masters ran the releases.
#[derive(Debug, Default)]
pub(crate) struct Leftovers {
    pub(crate) failed: Vec<Failed>,
    /// Per client: the failed rounds (indices) some release is still owed
    /// for, so that a command costs nothing when none is.
    open: Vec<Vec<usize>>,
    /// Per client, per address: when its connections there ended.
    ends: Vec<Vec<Vec<u64>>>,
    /// Releases run that left a key with the round's token behind.
    pub(crate) errors: Vec<String>,
}

impl Leftovers {
    pub(crate) fn new(clients: usize, addrs: usize) -> Leftovers {
        Leftovers {
            open: vec![Vec::new(); clients],
            ends: vec![vec![Vec::new(); addrs]; clients],
            ..Leftovers::default()
        }
    }

    /// Client `c` decided a round lost: its release is owed where
    /// `failed.owed` says.
    pub(crate) fn decided(&mut self, failed: Failed) {
        if failed.owed != 0 {
            self.open[failed.client].push(self.failed.len());
        }
        self.failed.push(failed);
    }

    /// The master at address `a`, `master` as it is at the decision of
    /// `failed` (its clock at `now_us`), refused that acquire: its release
    /// skips the master, which must then hold no key with the round's
    /// token.
    pub(crate) fn refused_by(&mut self, a: usize, master: &Master, now_us: u64, failed: &Failed) {
        if let Some(key) = holding(master, &failed.resources, &failed.token, now_us) {
            self.errors.push(format!(
                "master at address {a} refused client {}'s acquire (decided at {:.6}s), which its release skips, yet holds {} with its token",
                failed.client,
                super::history::secs(failed.decided),
                super::show(key),
            ));
        }
    }

    /// Client `c`'s connection to address `a` ended at `t` (either side).
    pub(crate) fn ended(&mut self, c: usize, a: usize, t: u64) {
        self.ends[c][a].push(t);
    }

    /// The master at address `a` ran `words` from client `c` at `t` (its
    /// clock at `now_us`), leaving `master` as it is now: a release of a
    /// failed round of `c` is recorded, and must have left no key with
    /// that round's token.
    pub(crate) fn ran(
        &mut self,
        c: usize,
        a: usize,
        t: u64,
        master: &Master,
        now_us: u64,
        words: &[Vec<u8>],
    ) {
        if self.open[c].is_empty() || !is_release_script(words) {
            return;
        }
        let Self {
            failed,
            open,
            errors,
            ..
        } = self;
        open[c].retain(|&f| {
            let round = &mut failed[f];
            if round.owed >> a & 1 == 1
                && round.answered[a].is_none()
                && words.iter().any(|w| w[..] == round.token[..])
            {
                round.answered[a] = Some(t);
                if let Some(key) = holding(master, &round.resources, &round.token, now_us) {
                    errors.push(format!(
                        "master at address {a} still holds {} with the token of client {c}'s failed acquire (decided at {:.6}s) right after running its release, at {:.6}s",
                        super::show(key),
                        super::history::secs(round.decided),
                        super::history::secs(t)
                    ));
                }
            }
            (0..round.answered.len())
                .any(|i| round.owed >> i & 1 == 1 && round.answered[i].is_none())
        });
    }

    /// The releases owed and never run, unless the connection ended since
    /// the decision or `lost(a, from)` (the master at address `a` lost its
    /// data or restarted since `from`).
    pub(crate) fn unanswered(&self, lost: impl Fn(usize, u64) -> bool) -> Vec<String> {
        let mut found = Vec::new();
        for round in &self.failed {
            for (a, answered) in round.answered.iter().enumerate() {
                if round.owed >> a & 1 == 0 || answered.is_some() {
                    continue;
                }
                let ended = self.ends[round.client][a]
                    .iter()
                    .any(|&t| t >= round.decided);
                if ended || lost(a, round.decided) {
                    continue;
                }
                found.push(format!(
                    "client {}'s failed acquire of {:?} (decided at {:.6}s, token {:02x}{:02x}..) never had its release run by the master at address {a}, whose connection stayed up",
                    round.client,
                    round
                        .resources
                        .iter()
                        .map(|r| super::show(r))
                        .collect::<Vec<_>>(),
                    super::history::secs(round.decided),
                    round.token[0],
                    round.token[1],
                ));
            }
        }
        found
    }

    /// The failed rounds examined: those with a release owed somewhere.
    pub(crate) fn examined(&self) -> u64 {
        self.failed.iter().filter(|f| f.owed != 0).count() as u64
    }
}

/// Whether `words` run a release script (`EVALSHA` by its SHA-1, or
/// `EVAL` of its text, as a client falls back after `NOSCRIPT`).
fn is_release_script(words: &[Vec<u8>]) -> bool {
    let [command, script, ..] = words else {
        return false;
    };
    [Script::Release, Script::ReleaseMany].iter().any(|s| {
        (command.eq_ignore_ascii_case(b"EVALSHA")
            && script.eq_ignore_ascii_case(s.sha1().as_bytes()))
            || (command.eq_ignore_ascii_case(b"EVAL") && script[..] == *s.text().as_bytes())
    })
}

/// The first of `resources` that `master` holds with `token` at `now_us`.
fn holding<'r>(
    master: &Master,
    resources: &'r [Vec<u8>],
    token: &[u8],
    now_us: u64,
) -> Option<&'r [u8]> {
    resources
        .iter()
        .find(|r| master.get(0, r, now_us) == Some(token))
        .map(Vec::as_slice)
}

#[cfg(test)]
mod tests {
    use super::{Failed, Leftovers, is_release_script};
    use crate::{ConnState, Master, Moment};
    use redlock_mio::scripts::Script;

    const TOKEN: [u8; redlock_mio::TOKEN_LEN] = [7; redlock_mio::TOKEN_LEN];

    fn words(parts: &[&[u8]]) -> Vec<Vec<u8>> {
        parts.iter().map(|p| p.to_vec()).collect()
    }

    fn resp(words: &[Vec<u8>]) -> Vec<u8> {
        let mut out = format!("*{}\r\n", words.len()).into_bytes();
        for w in words {
            out.extend_from_slice(format!("${}\r\n", w.len()).as_bytes());
            out.extend_from_slice(w);
            out.extend_from_slice(b"\r\n");
        }
        out
    }

    /// A master that holds `r` with the token, and the failed round of
    /// client 0 owed to addresses 0 and 1.
    fn world() -> (Master, Leftovers) {
        let mut master = Master::new(1, 1_000_000);
        let mut conn = master.connect();
        let mut out = Vec::new();
        let set = words(&[b"SET", b"r", &TOKEN, b"PX", b"10000"]);
        let state = master.handle(&mut conn, &resp(&set), 1_000_000, &mut out);
        assert_eq!(state, ConnState::Open);
        let mut leftovers = Leftovers::new(1, 2);
        leftovers.decided(Failed {
            client: 0,
            token: TOKEN,
            resources: vec![b"r".to_vec()],
            decided: 10,
            owed: 0b11,
            answered: vec![None; 2],
        });
        (master, leftovers)
    }

    fn release() -> Vec<Vec<u8>> {
        let sha = Script::Release.sha1().as_bytes();
        words(&[b"EVALSHA", sha, b"1", b"r", &TOKEN])
    }

    #[test]
    fn releases_are_told_by_their_script() {
        assert!(is_release_script(&release()));
        let eval = words(&[b"eval", Script::Release.text().as_bytes(), b"1", b"r"]);
        assert!(is_release_script(&eval));
        let extend = words(&[b"EVALSHA", Script::Extend.sha1().as_bytes(), b"1", b"r"]);
        assert!(!is_release_script(&extend));
        assert!(!is_release_script(&words(&[b"GET", b"r"])));
    }

    #[test]
    fn a_release_that_leaves_the_token_behind_is_found() {
        let (master, mut leftovers) = world();
        // The key is still there when "the release ran": a release that
        // deleted nothing.
        leftovers.ran(0, 0, 20, &master, 1_000_001, &release());
        assert_eq!(leftovers.errors.len(), 1, "{:?}", leftovers.errors);
        // Another client's command, or a command without the token, is
        // not this round's release.
        leftovers.ran(0, 1, 20, &master, 1_000_001, &words(&[b"GET", b"r"]));
        assert_eq!(leftovers.errors.len(), 1);
    }

    #[test]
    fn a_release_that_deletes_the_grant_passes_and_answers_its_address() {
        let (mut master, mut leftovers) = world();
        let mut conn = master.connect();
        let mut out = Vec::new();
        let mut seen = Vec::new();
        // `EVAL`: the new master has no script cached for an `EVALSHA`.
        let text = Script::Release.text().as_bytes();
        let release = words(&[b"EVAL", text, b"1", b"r", &TOKEN]);
        master.handle_observed(
            &mut conn,
            &resp(&release),
            1_000_001,
            &mut out,
            &mut |m, w, moment| {
                if moment == Moment::After {
                    leftovers.ran(0, 0, 20, m, 1_000_001, w);
                    seen.push(w.to_vec());
                }
            },
        );
        assert_eq!(seen, vec![release]);
        assert!(leftovers.errors.is_empty(), "{:?}", leftovers.errors);
        assert_eq!(leftovers.failed[0].answered, vec![Some(20), None]);
        assert_eq!(leftovers.examined(), 1);
    }

    #[test]
    fn releases_never_run_are_found_unless_excused() {
        let (_, mut leftovers) = world();
        // Neither address ran it.
        assert_eq!(leftovers.unanswered(|_, _| false).len(), 2);
        // Address 0 lost its data since; address 1's connection ended
        // before the decision, which excuses nothing.
        leftovers.ended(0, 1, 5);
        let found = leftovers.unanswered(|a, from| a == 0 && from <= 10);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("address 1"), "{found:?}");
        // Its connection ends after the decision: excused.
        leftovers.ended(0, 1, 10);
        assert!(leftovers.unanswered(|a, _| a == 0).is_empty());
    }
}
