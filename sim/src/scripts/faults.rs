//! The deliberate faults of the hand-off ([`HandoffFault`]), made as
//! patches of the scripts' real text before a faulted master compiles it:
//! the client sends the real script's SHA-1, and that master runs the
//! patched text under it.
//!
//! A patch replaces a part of the text. A part no script holds any more
//! (the script was edited) panics at once, when the master is made: an
//! edit of the scripts can never silently disable the regression that
//! proves a checker can fail.

use redlock_mio::scripts::Script;

use crate::HandoffFault;

/// A patch: every occurrence of its first text, in the scripts that hold
/// it, becomes its second.
type Patch = (&'static str, String);

/// The loop of `tell` in `handoff.lua`, over batches of queue entries.
const TELL_BATCH: &str = "while true do\nlocal batch = redis.pcall(\"zrange\", q, i, i + 31)\n";

/// The patches that make `fault`.
fn patches(fault: HandoffFault) -> Vec<Patch> {
    match fault {
        // `handoff.lua`: the hand-off returns at once.
        HandoffFault::Untold => vec![(
            "local function handoff(k)\n",
            "local function handoff(k)\ndo return end\n".to_owned(),
        )],
        // `handoff.lua`: the loops of `handoff` and `tell` look at `n`
        // entries at most, then give up (`tell` reads one batch of `n`).
        HandoffFault::SkipCapped(n) => vec![
            (
                TELL_BATCH,
                format!(
                    "for _ = 1, 1 do\nlocal batch = redis.pcall(\"zrange\", q, i, i + {})\n",
                    n.saturating_sub(1)
                ),
            ),
            ("while true do\n", format!("for _ = 1, {n} do\n")),
        ],
        // `waiting.lua`: a waiter's turn never comes.
        HandoffFault::TurnIgnored => vec![(
            "local function turn(k, m)\n",
            "local function turn(k, m)\ndo return false end\n".to_owned(),
        )],
        // `waiting.lua`: `enqueue` no longer leaves the keys that do not
        // block the waiter.
        HandoffFault::KeptForSeveral => {
            vec![("else\nleave(KEYS[i], m)\nend\n", "end\n".to_owned())]
        }
        // `waiting.lua`: `place` takes the claimed place as it is.
        HandoffFault::PlaceAsClaimed => vec![(
            "local function place(claimed)\n",
            "local function place(claimed)\ndo return claimed end\n".to_owned(),
        )],
    }
}

/// Panics unless every patch of `fault` finds its text in a script.
pub(crate) fn check(fault: HandoffFault) {
    for (needle, _) in patches(fault) {
        assert!(
            Script::ALL.iter().any(|s| s.text().contains(needle)),
            "the fault {fault:?} patches {needle:?}, which no script holds any more: \
             patch the scripts as they are now"
        );
    }
}

/// `text` with `fault`'s patches applied.
pub(crate) fn patch(text: &str, fault: HandoffFault) -> String {
    patches(fault)
        .into_iter()
        .fold(text.to_owned(), |text, (needle, with)| {
            text.replace(needle, &with)
        })
}

#[cfg(test)]
mod tests {
    use redlock_mio::scripts::Script;

    use super::{check, patch};
    use crate::HandoffFault;

    const FAULTS: [HandoffFault; 5] = [
        HandoffFault::Untold,
        HandoffFault::SkipCapped(8),
        HandoffFault::TurnIgnored,
        HandoffFault::KeptForSeveral,
        HandoffFault::PlaceAsClaimed,
    ];

    #[test]
    fn every_fault_patches_the_scripts_it_breaks() {
        for fault in FAULTS {
            check(fault);
        }
        let release = Script::Release.text();
        let untold = patch(release, HandoffFault::Untold);
        assert!(untold.contains("local function handoff(k)\ndo return end\n"));
        let capped = patch(release, HandoffFault::SkipCapped(8));
        assert_eq!(capped.matches("for _ = 1, 8 do").count(), 1);
        assert!(
            capped
                .contains("for _ = 1, 1 do\nlocal batch = redis.pcall(\"zrange\", q, i, i + 7)\n")
        );
        assert!(!capped.contains("while true do"));
        let wait = Script::WaitAcquire.text();
        assert_ne!(patch(wait, HandoffFault::TurnIgnored), wait);
        let claimed = patch(wait, HandoffFault::PlaceAsClaimed);
        assert!(claimed.contains("local function place(claimed)\ndo return claimed end\n"));
        let kept = patch(wait, HandoffFault::KeptForSeveral);
        assert!(wait.contains("leave(KEYS[i], m)"));
        assert!(!kept.contains("leave(KEYS[i], m)"));
        // A script the fault does not reach is run as it is.
        assert_eq!(
            patch(Script::Extend.text(), HandoffFault::Untold),
            Script::Extend.text()
        );
    }

    #[test]
    fn every_patched_script_compiles() {
        let lua = mlua::Lua::new();
        for fault in FAULTS {
            for script in Script::ALL {
                let text = patch(script.text(), fault);
                if let Err(e) = lua.load(text).into_function() {
                    panic!("{script:?} under {fault:?}: {e}");
                }
            }
        }
    }
}
