//! `CLIENT TRACKING` and `CLIENT CACHING`: client tracking, as the loss
//! watch asks for it (see [`crate::tracking`]).

use super::{Ctx, not_an_integer, parse_int, syntax_error};
use crate::reply::Reply;
use crate::tracking::Mode;

/// The options of a `CLIENT TRACKING`, as Redis parses them.
#[derive(Default)]
struct Options {
    redirect: bool,
    bcast: bool,
    prefix: bool,
    optin: bool,
    optout: bool,
    noloop: bool,
}

/// `CLIENT TRACKING ON|OFF [OPTIN] [NOLOOP]`, with Redis's checks of the
/// options in Redis's order: each error a server gives, the model gives.
/// What a server would accept of `REDIRECT`, `BCAST`, `PREFIX` and
/// `OPTOUT` the model refuses with an error that says so. `OFF` ignores
/// the options once they parse; `ON` again replaces the mode (a switch
/// between the default mode and `OPTIN` included). A RESP2 connection
/// may track: it remembers keys and is written nothing.
pub(super) fn tracking(c: &mut Ctx<'_>) -> Reply {
    let mut options = Options::default();
    let mut words = c.words.iter().skip(3);
    while let Some(option) = words.next() {
        let more = words.len() > 0;
        match option.to_ascii_uppercase().as_slice() {
            b"REDIRECT" if more => {
                if options.redirect {
                    return Reply::error("ERR A client can only redirect to a single other client");
                }
                let id = words.next().map(|id| parse_int(id));
                if id.flatten().is_none() {
                    return not_an_integer();
                }
                // A server checks that a client with this id is connected:
                // the clients a case names are none.
                options.redirect = true;
            }
            b"BCAST" => options.bcast = true,
            b"OPTIN" => options.optin = true,
            b"OPTOUT" => options.optout = true,
            b"NOLOOP" => options.noloop = true,
            b"PREFIX" if more => {
                words.next();
                options.prefix = true;
            }
            _ => return syntax_error(),
        }
    }
    let id = c.session.id;
    let on = &c.words[2];
    if on.eq_ignore_ascii_case(b"OFF") {
        if options.redirect {
            return unimplemented("REDIRECT");
        }
        c.server.tracking.disable(id);
        return Reply::OK;
    }
    if !on.eq_ignore_ascii_case(b"ON") {
        return syntax_error();
    }
    let was = c.server.tracking.mode(id);
    if options.prefix && !options.bcast {
        return Reply::error("ERR PREFIX option requires BCAST mode to be enabled");
    }
    // The model never tracks in BCAST mode.
    if was.is_some() && options.bcast {
        return Reply::error(
            "ERR You can't switch BCAST mode on/off before disabling tracking for this client, and then re-enabling it with a different mode.",
        );
    }
    if options.bcast && (options.optin || options.optout) {
        return Reply::error("ERR OPTIN and OPTOUT are not compatible with BCAST");
    }
    if options.optin && options.optout {
        return Reply::error("ERR You can't specify both OPTIN mode and OPTOUT mode");
    }
    if options.optout && was.is_some_and(|mode| mode.optin) {
        return Reply::error(
            "ERR You can't switch OPTIN/OPTOUT mode before disabling tracking for this client, and then re-enabling it with a different mode.",
        );
    }
    for (given, name) in [
        (options.redirect, "REDIRECT"),
        (options.bcast, "BCAST"),
        (options.optout, "OPTOUT"),
    ] {
        if given {
            return unimplemented(name);
        }
    }
    let mode = Mode {
        optin: options.optin,
        noloop: options.noloop,
    };
    c.server.tracking.enable(id, mode, c.session.protocol);
    Reply::OK
}

/// The refusal of an option a server would accept.
fn unimplemented(option: &str) -> Reply {
    Reply::error(format!(
        "ERR the model does not implement CLIENT TRACKING's {option}"
    ))
}

/// `CLIENT CACHING YES|NO`, with Redis's checks in Redis's order: with
/// `OPTIN`, `YES` has the next command's reads tracked. `NO` needs
/// `OPTOUT`, which the model lacks.
pub(super) fn caching(c: &mut Ctx<'_>) -> Reply {
    let Some(mode) = c.server.tracking.mode(c.session.id) else {
        return Reply::error(
            "ERR CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode enabled",
        );
    };
    match c.words[2].to_ascii_uppercase().as_slice() {
        b"YES" if mode.optin => {
            c.session.caching = true;
            Reply::OK
        }
        b"YES" => Reply::error(
            "ERR CLIENT CACHING YES is only valid when tracking is enabled in OPTIN mode.",
        ),
        b"NO" => Reply::error(
            "ERR CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode.",
        ),
        _ => syntax_error(),
    }
}
