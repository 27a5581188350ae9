//! An image's `User` (`name`, `uid`, `name:group`, `uid:gid`…) resolved through the
//! image's own `/etc/passwd` and `/etc/group`, as Docker does: a numeric uid needs no
//! passwd entry (its gid is then the entry's, or 0); a name must be there; the
//! supplementary groups are the groups that list the user by name.

use sandboxd_agent_protocol::UserIds;

/// The sandbox's id range: ids past it have no mapping.
const ID_RANGE: u32 = 65536;

struct Passwd<'a> {
    name: &'a str,
    uid: u32,
    gid: u32,
    home: &'a str,
}

fn passwd_entries(text: &str) -> impl Iterator<Item = Passwd<'_>> {
    text.lines().filter_map(|line| {
        let f: Vec<&str> = line.split(':').collect();
        (f.len() >= 4).then_some(())?;
        Some(Passwd {
            name: f[0],
            uid: f[2].parse().ok()?,
            gid: f[3].parse().ok()?,
            home: f.get(5).copied().unwrap_or(""),
        })
    })
}

/// `(name, gid, members)` of each well-formed `/etc/group` line.
fn group_entries(text: &str) -> impl Iterator<Item = (&str, u32, Vec<&str>)> {
    text.lines().filter_map(|line| {
        let f: Vec<&str> = line.split(':').collect();
        (f.len() >= 3).then_some(())?;
        let members = f
            .get(3)
            .map(|m| m.split(',').filter(|s| !s.is_empty()).collect())
            .unwrap_or_default();
        Some((f[0], f[2].parse().ok()?, members))
    })
}

fn numeric(s: &str) -> Option<u32> {
    (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
        .then(|| s.parse().ok())
        .flatten()
}

/// Resolves `spec` with the image's passwd and group files (`None` when absent).
pub fn resolve(spec: &str, passwd: Option<&str>, group: Option<&str>) -> Result<UserIds, String> {
    resolve_with_home(spec, passwd, group).map(|(ids, _)| ids)
}

/// [`resolve`], with the user's home directory when its passwd entry names one.
pub fn resolve_with_home(
    spec: &str,
    passwd: Option<&str>,
    group: Option<&str>,
) -> Result<(UserIds, Option<String>), String> {
    let (user, grp) = match spec.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (spec, None),
    };
    let passwd = passwd.unwrap_or("");
    let group = group.unwrap_or("");
    let entry = match numeric(user) {
        Some(uid) => passwd_entries(passwd).find(|p| p.uid == uid),
        None => Some(
            passwd_entries(passwd)
                .find(|p| p.name == user)
                .ok_or_else(|| {
                    format!("the image's user {user:?} is not in the image's /etc/passwd")
                })?,
        ),
    };
    // A name that resolved has an entry; a number is its own uid.
    let uid = numeric(user).or(entry.as_ref().map(|p| p.uid)).unwrap_or(0);
    let gid = match grp {
        None => entry.as_ref().map_or(0, |p| p.gid),
        Some(g) => match numeric(g) {
            Some(gid) => gid,
            None => group_entries(group)
                .find(|(name, _, _)| *name == g)
                .map(|(_, gid, _)| gid)
                .ok_or_else(|| {
                    format!("the image's group {g:?} is not in the image's /etc/group")
                })?,
        },
    };
    let mut groups = vec![gid];
    if let Some(p) = &entry {
        for (_, g, members) in group_entries(group) {
            if members.contains(&p.name) && !groups.contains(&g) {
                groups.push(g);
            }
        }
    }
    for id in std::iter::once(uid).chain(groups.iter().copied()) {
        if id >= ID_RANGE {
            return Err(format!(
                "the image's user {spec:?} needs id {id}, outside the sandbox's ids 0-{}",
                ID_RANGE - 1
            ));
        }
    }
    let home = entry
        .as_ref()
        .map(|p| p.home)
        .filter(|h| h.starts_with('/'))
        .map(str::to_owned);
    Ok((UserIds { uid, gid, groups }, home))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASSWD: &str = "root:x:0:0:root:/root:/bin/sh\napp:x:1234:2345::/home/app:/bin/sh\n";
    const GROUP: &str = "root:x:0:\napp:x:2345:\nextra:x:3456:app,other\nnone:x:4567:other\n";

    fn ids(uid: u32, gid: u32, groups: &[u32]) -> UserIds {
        UserIds {
            uid,
            gid,
            groups: groups.to_vec(),
        }
    }

    #[test]
    fn names_and_numbers_resolve_as_docker_does() {
        let r = |s| resolve(s, Some(PASSWD), Some(GROUP));
        assert_eq!(r("app"), Ok(ids(1234, 2345, &[2345, 3456])));
        assert_eq!(r("1234"), Ok(ids(1234, 2345, &[2345, 3456])));
        assert_eq!(r("app:extra"), Ok(ids(1234, 3456, &[3456])));
        assert_eq!(r("app:77"), Ok(ids(1234, 77, &[77, 3456])));
        assert_eq!(r("4321"), Ok(ids(4321, 0, &[0])));
        assert_eq!(
            resolve("4321:8765", None, None),
            Ok(ids(4321, 8765, &[8765]))
        );
        assert!(r("ghost")
            .unwrap_err()
            .contains("\"ghost\" is not in the image's /etc/passwd"));
        assert!(r("app:ghosts").unwrap_err().contains("/etc/group"));
        assert!(resolve("app", None, None).is_err());
        assert!(r("70000")
            .unwrap_err()
            .contains("outside the sandbox's ids"));
        assert!(r("1:70000").is_err());
        let home = |s| resolve_with_home(s, Some(PASSWD), Some(GROUP)).map(|(_, h)| h);
        assert_eq!(home("app"), Ok(Some("/home/app".into())));
        assert_eq!(home("1234:1"), Ok(Some("/home/app".into())));
        assert_eq!(home("4321"), Ok(None));
    }
}
