//! The token rules, without a server: scopes, minting, revocation, the store, the bounds.

use super::*;

fn root() -> Option<Token> {
    Some(Token::new("root-token-of-the-test".to_owned()))
}

fn request(scopes: &[Scope], ttl_secs: u64) -> TokenRequest {
    TokenRequest {
        name: "t".to_owned(),
        scopes: scopes.to_vec(),
        ttl_secs,
    }
}

fn bearer(token: &str) -> Vec<u8> {
    format!("Bearer {token}").into_bytes()
}

#[test]
fn a_minted_token_is_its_scopes_and_nothing_else() {
    let tokens = Tokens::new(root());
    let minted = tokens
        .mint(&Caller::Root, &request(&[Scope::Read], 60))
        .unwrap();
    let caller = tokens.authenticate(Some(&bearer(&minted.token))).unwrap();
    assert!(caller.holds(Scope::Read));
    assert!(!caller.holds(Scope::Run));
    assert_eq!(caller.token_id(), Some(minted.info.id.as_str()));
    // One digit changed in the secret: the id still matches, the hash does not.
    let mut forged = minted.token;
    let last = if forged.ends_with('0') { "1" } else { "0" };
    forged.replace_range(forged.len() - 1.., last);
    assert_eq!(
        tokens.authenticate(Some(&bearer(&forged))),
        Err(Refused::Wrong)
    );
}

#[test]
fn a_token_mints_only_what_it_holds_and_never_outlives_itself() {
    let tokens = Tokens::new(root());
    let admin = tokens
        .mint(&Caller::Root, &request(&[Scope::Admin, Scope::Read], 100))
        .unwrap();
    let admin = tokens.authenticate(Some(&bearer(&admin.token))).unwrap();
    let wider = tokens
        .mint(&admin, &request(&[Scope::Run], 10))
        .unwrap_err();
    assert!(wider.to_string().contains("`run` is not held"), "{wider}");
    let longer = tokens
        .mint(&admin, &request(&[Scope::Read], 1000))
        .unwrap_err();
    assert!(longer.to_string().contains("outlive"), "{longer}");
    tokens.mint(&admin, &request(&[Scope::Read], 50)).unwrap();
}

#[test]
fn the_schema_states_the_longest_lifetime() {
    let schema = serde_json::to_value(<TokenRequest as utoipa::PartialSchema>::schema()).unwrap();
    assert_eq!(schema["properties"]["ttl_secs"]["maximum"], MAX_TTL_SECS);
}

#[test]
fn the_number_of_tokens_is_bounded() {
    let tokens = Tokens::new(root());
    for _ in 0..MAX_TOKENS {
        tokens
            .mint(&Caller::Root, &request(&[Scope::Read], 60))
            .unwrap();
    }
    let err = tokens
        .mint(&Caller::Root, &request(&[Scope::Read], 60))
        .unwrap_err();
    assert!(err.to_string().contains("revoke some"), "{err}");
    let first = tokens.list().pop().unwrap();
    tokens.revoke(&first.id).unwrap();
    tokens
        .mint(&Caller::Root, &request(&[Scope::Read], 60))
        .unwrap();
}

#[test]
fn a_revoked_token_is_named_as_such() {
    let tokens = Tokens::new(root());
    let minted = tokens
        .mint(&Caller::Root, &request(&[Scope::Run], 60))
        .unwrap();
    tokens.revoke(&minted.info.id).unwrap();
    assert_eq!(
        tokens.authenticate(Some(&bearer(&minted.token))),
        Err(Refused::Revoked {
            id: minted.info.id.clone()
        })
    );
    assert!(tokens.list().is_empty());
    assert!(matches!(
        tokens.revoke(&minted.info.id),
        Err(TokenError::Unknown(_))
    ));
}

/// Issue 55: revoking a token revoked the token only; the tokens it minted stayed valid and
/// minted more. Now the whole family goes, and a sibling minted by root stays.
#[test]
fn revoking_a_token_revokes_every_token_it_minted() {
    let tokens = Tokens::new(root());
    let parent = tokens
        .mint(&Caller::Root, &request(&[Scope::Admin, Scope::Read], 100))
        .unwrap();
    let parent_caller = tokens.authenticate(Some(&bearer(&parent.token))).unwrap();
    let child = tokens
        .mint(&parent_caller, &request(&[Scope::Admin, Scope::Read], 50))
        .unwrap();
    let child_caller = tokens.authenticate(Some(&bearer(&child.token))).unwrap();
    let grandchild = tokens
        .mint(&child_caller, &request(&[Scope::Read], 40))
        .unwrap();
    let sibling = tokens
        .mint(&Caller::Root, &request(&[Scope::Read], 100))
        .unwrap();
    let with_it = tokens.revoke(&parent.info.id).unwrap();
    assert_eq!(
        with_it,
        vec![child.info.id.clone(), grandchild.info.id.clone()]
    );
    for token in [&parent, &child, &grandchild] {
        assert_eq!(
            tokens.authenticate(Some(&bearer(&token.token))),
            Err(Refused::Revoked {
                id: token.info.id.clone()
            })
        );
    }
    assert!(tokens.authenticate(Some(&bearer(&sibling.token))).is_ok());
    // A request that passed the door before the revocation mints nothing after it.
    let late = tokens
        .mint(&child_caller, &request(&[Scope::Read], 10))
        .unwrap_err();
    assert!(late.to_string().contains("revoked"), "{late}");
}

#[test]
fn the_store_keeps_hashes_across_a_restart_and_refuses_a_broken_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokens.json");
    let tokens = Tokens::open(root(), &path).unwrap();
    let minted = tokens
        .mint(&Caller::Root, &request(&[Scope::Write], 60))
        .unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(
        !text.contains(&minted.token),
        "the secret reached the store"
    );
    assert!(text.contains(&sha256_hex(minted.token.as_bytes())));
    let reopened = Tokens::open(root(), &path).unwrap();
    assert!(
        reopened
            .authenticate(Some(&bearer(&minted.token)))
            .unwrap()
            .holds(Scope::Write)
    );
    std::fs::write(&path, "{not json").unwrap();
    let err = Tokens::open(root(), &path).unwrap_err();
    assert!(err.to_string().contains("not a token store"), "{err}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "{not json");
}
