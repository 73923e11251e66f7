//! The conformance suite: one set of cases that every distlock backend
//! runs against its real server.
//!
//! A backend's test file implements [`Fixture`] and expands
//! [`conformance_suite!`], which makes one `#[tokio::test]` per case, so a
//! failure names its case. Every case uses fresh random lock names, so tests
//! can share one server and run in parallel.
//!
//! ```ignore
//! struct MyFixture;
//! #[async_trait::async_trait]
//! impl distlock_conformance::Fixture for MyFixture { /* … */ }
//! distlock_conformance::conformance_suite!(MyFixture);
//! ```

pub mod cases;
mod child;
pub mod coordination;
pub mod fair;
mod fixture;
pub mod kinds;
pub mod listing;
mod process;
pub mod regressions;
pub mod resume;
mod support;
pub mod warnings;

pub use child::in_child_with_env;
pub use fixture::Fixture;
pub use support::{test_options, unique_name};

/// Expands the suite into one test per case for the fixture built by the
/// given expression (evaluated afresh in each test).
///
/// `conformance_suite!(fixture)` includes the cross-process cases, which run
/// the `distlock` command; `conformance_suite!(in_process: fixture)` leaves
/// them out, for backends that live in one process.
/// `conformance_suite!(env("NAME" = "value"): fixture)` runs every case,
/// the cross-process ones included, in a child process of the test binary
/// with that environment variable set, for settings a process reads once
/// (see [`in_child_with_env`]).
#[macro_export]
macro_rules! conformance_suite {
    (in_process: $fixture:expr) => {
        $crate::conformance_suite!(@in_process [] $fixture);
    };
    (env($key:literal = $value:literal): $fixture:expr) => {
        $crate::conformance_suite!(@all [$key = $value] $fixture);
    };
    ($fixture:expr) => {
        $crate::conformance_suite!(@all [] $fixture);
    };
    (@all $env:tt $fixture:expr) => {
        $crate::conformance_suite!(@in_process $env $fixture);
        $crate::conformance_suite!(@group cases $env $fixture;
            cross_process_sigkill_frees_the_lock,
            cross_process_sigstop_holder,
            cross_process_election_survives_a_killed_leader,
        );
        $crate::conformance_suite!(@group kinds $env $fixture;
            cross_process_sigkill_frees_each_kind,
        );
    };
    (@in_process $env:tt $fixture:expr) => {
        $crate::conformance_suite!(@group cases $env $fixture;
            acquire_and_release,
            contended_try_acquire_returns_none,
            zero_timeout_tries_once,
            short_timeout_is_honoured,
            cancelled_acquire_leaves_nothing_held,
            acquire_or_cancel_returns_holding_nothing,
            mutual_exclusion_across_clients,
            local_waiters_share_one_lock,
            names_are_case_sensitive_and_exact,
            list_shows_held_locks,
            release_is_idempotent_and_owner_checked,
            hand_over_is_atomic_and_owner_checked,
            extension_keeps_the_lock_across_three_leases,
            lost_fires_on_forced_release,
            fencing_tokens_increase_across_release_and_expiry,
            with_lock_releases_on_every_path,
            dropped_guard_releases,
        );
        $crate::conformance_suite!(@group coordination $env $fixture;
            opposite_orders_never_deadlock,
            a_set_that_times_out_holds_nothing,
            a_cancelled_set_holds_nothing,
            a_set_reports_the_loss_of_any_member,
            max_hold_ends_the_hold,
            min_hold_keeps_a_released_lock_until_it_passes,
            an_election_passes_on_and_observers_see_each_term,
            an_observer_sees_every_term_the_short_ones_too,
            an_observer_that_fell_behind_is_told_and_goes_on,
            a_grant_nobody_received_leaves_no_term,
        );
        $crate::conformance_suite!(@group regressions $env $fixture;
            a_retried_release_never_deletes_a_newer_holders_lock,
            no_extension_after_release,
            a_waiter_whose_session_ended_is_not_granted_on_it,
        );
        $crate::conformance_suite!(@group kinds $env $fixture;
            readers_overlap,
            a_writer_excludes_readers_and_writers,
            a_waiting_writer_is_served_before_later_readers,
            a_writer_waiting_behind_a_writer_keeps_later_readers_out,
            a_writer_that_gave_up_lets_readers_in,
            a_semaphore_never_exceeds_its_limit_and_reaches_it,
            a_dead_holders_permit_returns,
            kind_and_limit_conflicts_are_errors,
            tokens_increase_across_kinds,
            lost_fires_for_each_kind,
            cancelled_waits_leave_nothing_held_for_each_kind,
        );
        $crate::conformance_suite!(@group warnings $env $fixture;
            a_failed_extension_puts_the_lock_at_risk_until_confirmed,
            an_unanswered_extension_warns_before_the_lease_runs_out,
            a_loss_is_the_last_warning,
        );
        $crate::conformance_suite!(@group listing $env $fixture;
            list_shows_waiters_in_order_or_says_it_cannot,
        );
        $crate::conformance_suite!(@group resume $env $fixture;
            a_handle_resumes_its_grant_with_the_same_token,
            a_released_or_spent_handle_is_lost,
            two_resumes_of_one_handle_cannot_both_hold,
            a_handle_whose_lease_ran_out_is_lost,
            a_killed_run_restarted_with_its_resume_file_keeps_its_grant,
        );
    };
    (@group $module:ident $env:tt $fixture:expr; $($case:ident),* $(,)?) => {
        $(
            #[::tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() {
                $crate::conformance_suite!(@run $env $case {
                    let fixture = $fixture;
                    $crate::$module::$case(&fixture).await;
                });
            }
        )*
    };
    // A case runs here, or, with an environment variable to set, in the
    // child process that has it.
    (@run [] $case:ident $body:block) => {
        $body
    };
    (@run [$key:literal = $value:literal] $case:ident $body:block) => {
        if $crate::in_child_with_env(module_path!(), stringify!($case), $key, $value) $body
    };
}
