//! What a backend tells the campaign of itself: the values that
//! [`CampaignBackend`](crate::campaign::CampaignBackend)'s methods answer
//! with.

/// What a server restart does to the locks held on it (R1, R6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnRestart {
    /// They outlive it: a holder whose extensions resume in time keeps its
    /// lock.
    Kept,
    /// They end with their holders' connections, and each holder hears it
    /// as its connection ends, before the server is back to grant them
    /// again: overlaps stay forbidden.
    EndedAndTold,
    /// The server forgets them without a word, and holders learn it at
    /// their next extension: overlaps until then are reported, not
    /// forbidden.
    Forgotten,
}

/// How an acquisition's answer can be lost on the way back (R5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LostAnswer {
    /// MongoDB's `failCommand` fail point closes the connection of the
    /// client's `findAndModify`, which then does not run.
    FailPoint,
    /// The proxy passes the acquisition to the server, which applies it,
    /// and resets the connection before the reply passes.
    ResetAfterRequest,
    /// The same, kept for the first write (an HTTP `PUT`): the reads an
    /// acquisition makes before it pass.
    ResetAfterWrite,
}

/// What a step of the server's wall clock reaches (R13), on a backend
/// whose server libfaketime can move.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClockStep {
    /// Whether the clock the backend reads from the server
    /// (`server_info`) is the one libfaketime steps, so that the step must
    /// show there.
    pub(crate) clock_moves: bool,
    /// Whether leases are judged by that clock, so that a step forward
    /// ends them early and a step back makes them last longer.
    pub(crate) leases_follow: bool,
    /// Why, in a sentence for the report.
    pub(crate) why: &'static str,
}

/// What a backend changed so that its clients pass through fault proxies
/// ([`CampaignBackend::route_through`](crate::campaign::CampaignBackend::route_through)),
/// undone when dropped.
pub(crate) struct Detour(Option<Box<dyn FnOnce() + Send>>);

impl Detour {
    /// A detour that `undo` ends.
    pub(crate) fn new(undo: impl FnOnce() + Send + 'static) -> Self {
        Self(Some(Box::new(undo)))
    }
}

impl Drop for Detour {
    fn drop(&mut self) {
        if let Some(undo) = self.0.take() {
            undo();
        }
    }
}

/// A URL with a password canary in it, tried in R12.
pub(crate) struct SecretCase {
    pub(crate) label: &'static str,
    pub(crate) url: String,
    /// Said before the row's findings (why a backend without credentials
    /// is tried at all, say).
    pub(crate) note: &'static str,
}

impl SecretCase {
    /// A case with nothing said before its findings.
    pub(crate) fn new(label: &'static str, url: String) -> Self {
        Self {
            label,
            url,
            note: "",
        }
    }

    /// This case, with `note` said before its findings.
    pub(crate) fn with_note(self, note: &'static str) -> Self {
        Self { note, ..self }
    }
}
