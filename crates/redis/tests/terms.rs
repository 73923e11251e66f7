//! The record of an election's terms: written by a campaign's attempt in
//! the script that grants, once even when the attempt runs again, and never
//! by a plain grant. (Quorum mode keeps none: the conformance suite checks
//! that observing there is `Unsupported`.)

mod support;

use std::time::Duration;

use distlock_core::backend::BackendExt;
use distlock_core::backend::{AcquireRequest, Attempt, Backend, GrantState, WaitState};
use distlock_core::testing::ADMIN_LIMIT;
use distlock_core::{Claim, Holder};
use support::{backend, tokens_of_a_twice_run_attempt, unique, url};

/// A campaign's request for `name`, as core makes it.
fn campaign(name: &distlock_core::LockName) -> AcquireRequest {
    AcquireRequest {
        records_term: true,
        ..AcquireRequest::new(
            name.clone(),
            Claim::Exclusive,
            Duration::from_secs(30),
            Holder::this_process(Some("http://leader:1")).into(),
        )
    }
}

#[tokio::test]
async fn a_campaign_run_again_records_its_term_once_and_a_plain_grant_none() {
    for url in [url(), support::cluster_url()] {
        let backend = backend(&url).await;
        let log = backend.term_log().expect("a record of terms");

        let plain_name = unique("plain");
        let plain = AcquireRequest::new(
            plain_name.clone(),
            Claim::Exclusive,
            Duration::from_secs(30),
            Holder::this_process(None).into(),
        );
        let Attempt::Acquired { fencing_token, .. } = backend
            .try_acquire(&plain, &mut WaitState::new())
            .await
            .expect("try_acquire")
        else {
            panic!("a free name is granted");
        };
        // Redis keeps no empty list: no entry means no record was written.
        assert!(
            log.terms_after(&plain_name, 0, ADMIN_LIMIT)
                .await
                .unwrap()
                .is_empty(),
            "on {url}: a plain grant records no term"
        );
        let lease = plain.granted(fencing_token, GrantState::none());
        assert!(backend.release(&lease).await.unwrap());

        let name = unique("campaign");
        let request = campaign(&name);
        let on = format!("on {url}");
        let tokens = tokens_of_a_twice_run_attempt(&backend, &request, &on).await;
        assert_eq!(tokens[0], tokens[1]);
        let terms = log.terms_after(&name, 0, ADMIN_LIMIT).await.unwrap();
        assert_eq!(
            terms.len(),
            1,
            "on {url}: one term for one grant: {terms:?}"
        );
        assert_eq!((terms[0].term, terms[0].previous), (tokens[0], None));
        assert_eq!(terms[0].holder.label.as_deref(), Some("http://leader:1"));
        let lease = request.granted(tokens[0], GrantState::none());
        assert!(backend.release(&lease).await.unwrap());

        let next = campaign(&name);
        let Attempt::Acquired { fencing_token, .. } = backend
            .try_acquire(&next, &mut WaitState::new())
            .await
            .unwrap()
        else {
            panic!("a free name is granted");
        };
        let terms = log
            .terms_after(&name, tokens[0], ADMIN_LIMIT)
            .await
            .unwrap();
        assert_eq!(terms.len(), 1);
        assert_eq!(
            (terms[0].term, terms[0].previous),
            (fencing_token, Some(tokens[0]))
        );
        let lease = next.granted(fencing_token, GrantState::none());
        assert!(backend.release(&lease).await.unwrap());
    }
}
