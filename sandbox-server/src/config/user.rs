//! `--run-as`: the commands' user.

/// `UID[:GID]` as numbers, or a user's name (`nobody`), whose group is then theirs.
pub fn parse_user(text: &str) -> Result<(u32, u32), super::ConfigError> {
    let bad = |why: String| super::ConfigError::Range {
        flag: "run-as",
        why,
    };
    let (user, group) = match text.split_once(':') {
        Some((user, group)) => (user.trim(), Some(group.trim())),
        None => (text.trim(), None),
    };
    let (uid, primary_gid) = match user.parse::<u32>() {
        Ok(uid) => (uid, uid),
        Err(_) => match nix::unistd::User::from_name(user) {
            Ok(Some(found)) => (found.uid.as_raw(), found.gid.as_raw()),
            Ok(None) => {
                return Err(bad(format!(
                    "no user named `{user}` (expected UID[:GID] or a user name)"
                )));
            }
            Err(err) => return Err(bad(format!("looking up user `{user}`: {err}"))),
        },
    };
    let gid = match group {
        None => primary_gid,
        Some(group) => match group.parse::<u32>() {
            Ok(gid) => gid,
            Err(_) => match nix::unistd::Group::from_name(group) {
                Ok(Some(found)) => found.gid.as_raw(),
                _ => {
                    return Err(bad(format!(
                        "no group named `{group}` (expected UID[:GID] or names)"
                    )));
                }
            },
        },
    };
    Ok((uid, gid))
}
