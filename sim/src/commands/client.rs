//! `CLIENT TRACKING` and `CLIENT CACHING`: client tracking, as the loss
//! watch asks for it (see [`crate::tracking`]).

use super::{Ctx, syntax_error};
use crate::reply::{Protocol, Reply};
use crate::tracking::Mode;

/// `CLIENT TRACKING ON|OFF [OPTIN] [NOLOOP]`. `REDIRECT`, `BCAST`,
/// `PREFIX` and `OPTOUT` are refused with an error that says so, and so is
/// tracking on a RESP2 connection (which could be told only through a
/// redirection).
pub(super) fn tracking(c: &mut Ctx<'_>) -> Reply {
    let (on, options) = match c.words {
        [_, _, on, options @ ..] if on.eq_ignore_ascii_case(b"ON") => (true, options),
        [_, _, off, options @ ..] if off.eq_ignore_ascii_case(b"OFF") => (false, options),
        _ => return syntax_error(),
    };
    let mut mode = Mode {
        optin: false,
        noloop: false,
    };
    for option in options {
        match option.to_ascii_uppercase().as_slice() {
            b"OPTIN" => mode.optin = true,
            b"NOLOOP" => mode.noloop = true,
            b"REDIRECT" | b"BCAST" | b"PREFIX" | b"OPTOUT" => {
                let option = String::from_utf8_lossy(option);
                return Reply::error(format!(
                    "ERR the model does not implement CLIENT TRACKING's {option}"
                ));
            }
            _ => return syntax_error(),
        }
    }
    let id = c.session.id;
    if !on {
        c.server.tracking.disable(id);
        return Reply::OK;
    }
    if c.session.protocol == Protocol::Resp2 {
        return Reply::error("ERR the model tracks keys for RESP3 connections only (no REDIRECT)");
    }
    if let Some(was) = c.server.tracking.mode(id)
        && was.optin != mode.optin
    {
        return Reply::error(
            "ERR You can't switch OPTIN/OPTOUT mode before disabling tracking for this client, and then re-enabling it with a different mode.",
        );
    }
    c.server.tracking.enable(id, mode);
    Reply::OK
}

/// `CLIENT CACHING YES|NO`: with `OPTIN`, `YES` has the next command's
/// reads tracked. `NO` needs `OPTOUT`, which the model lacks.
pub(super) fn caching(c: &mut Ctx<'_>) -> Reply {
    let yes = match c.words[2].to_ascii_uppercase().as_slice() {
        b"YES" => true,
        b"NO" => false,
        _ => return syntax_error(),
    };
    let Some(mode) = c.server.tracking.mode(c.session.id) else {
        return Reply::error(
            "ERR CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode enabled",
        );
    };
    if !mode.optin {
        return Reply::error(
            "ERR CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode enabled",
        );
    }
    if !yes {
        return Reply::error(
            "ERR CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode.",
        );
    }
    c.session.caching = true;
    Reply::OK
}
