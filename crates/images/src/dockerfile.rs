//! Dockerfile parsing for `sandboxd templates build --file`: line continuations,
//! comments, JSON (exec) and shell forms, `KEY=VALUE` lists, and `$VAR`/`${VAR}`
//! substitution. Only the instructions sandboxd builds are accepted; every other one is
//! refused by name with its line number.

/// A command of RUN, CMD or ENTRYPOINT.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Shell form: run with `/bin/sh -c`.
    Shell(String),
    /// JSON form: the argv as written.
    Exec(Vec<String>),
}

/// COPY or ADD.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopySpec {
    pub sources: Vec<String>,
    pub dest: String,
    /// `--chown=UID[:GID]` (numeric ids only).
    pub chown: Option<(u32, u32)>,
    /// `--chmod=OCTAL`.
    pub chmod: Option<u32>,
}

/// One accepted instruction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    From(String),
    Run(Command),
    Copy(CopySpec),
    Add(CopySpec),
    Env(Vec<(String, String)>),
    Workdir(String),
    User(String),
    Arg(String, Option<String>),
    Label(Vec<(String, String)>),
    Cmd(Command),
    Entrypoint(Command),
}

/// An instruction, its 1-based line number and its text as written (continuations
/// joined).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instruction {
    pub line: usize,
    pub text: String,
    pub kind: Kind,
}

/// Why a Dockerfile was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("Dockerfile line {line}: {message}")]
pub struct DockerfileError {
    pub line: usize,
    pub message: String,
}

fn err(line: usize, message: impl Into<String>) -> DockerfileError {
    DockerfileError {
        line,
        message: message.into(),
    }
}

/// Instructions sandboxd knows and refuses (anything else is "unknown").
const REFUSED: [&str; 7] = [
    "EXPOSE",
    "HEALTHCHECK",
    "ONBUILD",
    "SHELL",
    "STOPSIGNAL",
    "VOLUME",
    "MAINTAINER",
];

/// Parses a Dockerfile: exactly one `FROM` first (after `ARG`s), no multi-stage builds.
pub fn parse(text: &str) -> Result<Vec<Instruction>, DockerfileError> {
    let mut out: Vec<Instruction> = Vec::new();
    for (line, logical) in logical_lines(text)? {
        let (word, rest) = match logical.split_once(char::is_whitespace) {
            Some((w, r)) => (w, r.trim()),
            None => (logical.as_str(), ""),
        };
        let name = word.to_ascii_uppercase();
        let kind = instruction(line, &name, rest)?;
        let seen_from = out.iter().any(|i| matches!(i.kind, Kind::From(_)));
        match (&kind, seen_from) {
            (Kind::From(_), true) => {
                return Err(err(
                    line,
                    "a second FROM (multi-stage builds) is not supported",
                ))
            }
            (Kind::From(_) | Kind::Arg(..), false) => {}
            (_, false) => return Err(err(line, format!("{name} before FROM"))),
            _ => {}
        }
        out.push(Instruction {
            line,
            text: logical,
            kind,
        });
    }
    if !out.iter().any(|i| matches!(i.kind, Kind::From(_))) {
        return Err(err(1, "no FROM instruction"));
    }
    Ok(out)
}

/// Joins continuation lines (a trailing `\`), dropping comments and blank lines;
/// each logical line with the number of its first physical line.
fn logical_lines(text: &str) -> Result<Vec<(usize, String)>, DockerfileError> {
    let mut out = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for (n, raw) in text.lines().enumerate() {
        let n = n + 1;
        let trimmed = raw.trim();
        if trimmed.starts_with('#') {
            if current.is_none() && trimmed.replace(' ', "").starts_with("#escape=") {
                let value = trimmed.split_once('=').map_or("", |(_, v)| v).trim();
                if value != "\\" {
                    return Err(err(n, "only the escape character `\\` is supported"));
                }
            }
            continue; // comments, also between continuation lines
        }
        if trimmed.is_empty() && current.is_none() {
            continue;
        }
        let (body, continues) = match trimmed.strip_suffix('\\') {
            Some(b) => (b, true),
            None => (trimmed, false),
        };
        let entry = current.get_or_insert_with(|| (n, String::new()));
        if !entry.1.is_empty() && !body.is_empty() {
            entry.1.push(' ');
        }
        entry.1.push_str(body.trim_end());
        if !continues {
            if let Some(done) = current.take() {
                out.push(done);
            }
        }
    }
    if let Some((n, _)) = current {
        return Err(err(n, "the file ends inside a line continuation"));
    }
    Ok(out)
}

fn instruction(line: usize, name: &str, rest: &str) -> Result<Kind, DockerfileError> {
    let need = |what: &str| match rest.is_empty() {
        true => Err(err(line, format!("{name} needs {what}"))),
        false => Ok(()),
    };
    Ok(match name {
        "FROM" => {
            need("an image")?;
            let words = words(line, rest)?;
            let image = words.first().cloned().unwrap_or_default();
            if words.iter().any(|w| w.starts_with("--")) {
                return Err(err(line, "FROM options (--platform…) are not supported"));
            }
            if words.len() > 1 {
                return Err(err(line, "FROM … AS (multi-stage builds) is not supported"));
            }
            Kind::From(image)
        }
        "RUN" => {
            need("a command")?;
            if rest.starts_with("--") {
                return Err(err(line, "RUN options (--mount…) are not supported"));
            }
            Kind::Run(command(line, rest)?)
        }
        "CMD" => Kind::Cmd(command(line, rest)?),
        "ENTRYPOINT" => Kind::Entrypoint(command(line, rest)?),
        "COPY" | "ADD" => {
            need("sources and a destination")?;
            let spec = copy_spec(line, name, rest)?;
            match name {
                "COPY" => Kind::Copy(spec),
                _ => Kind::Add(spec),
            }
        }
        "ENV" | "LABEL" => {
            need("KEY=VALUE")?;
            let pairs = pairs(line, name, rest)?;
            match name {
                "ENV" => Kind::Env(pairs),
                _ => Kind::Label(pairs),
            }
        }
        "WORKDIR" => {
            need("a directory")?;
            Kind::Workdir(single(line, name, rest)?)
        }
        "USER" => {
            need("a user")?;
            Kind::User(single(line, name, rest)?)
        }
        "ARG" => {
            need("a name")?;
            let word = single(line, name, rest)?;
            let (k, v) = match word.split_once('=') {
                Some((k, v)) => (k.to_owned(), Some(v.to_owned())),
                None => (word, None),
            };
            valid_key(line, name, &k)?;
            Kind::Arg(k, v)
        }
        other if REFUSED.contains(&other) => {
            return Err(err(
                line,
                format!("{other} is not supported by sandboxd builds"),
            ))
        }
        other => return Err(err(line, format!("unknown instruction {other}"))),
    })
}

fn valid_key(line: usize, name: &str, key: &str) -> Result<(), DockerfileError> {
    let ok = !key.is_empty()
        && !key.starts_with(|c: char| c.is_ascii_digit())
        && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    match ok || (name == "LABEL" && !key.is_empty()) {
        true => Ok(()),
        false => Err(err(line, format!("{name}: {key:?} is not a valid name"))),
    }
}

fn single(line: usize, name: &str, rest: &str) -> Result<String, DockerfileError> {
    let mut w = words(line, rest)?;
    match w.len() {
        1 => Ok(w.remove(0)),
        _ => Err(err(line, format!("{name} takes one argument"))),
    }
}

/// JSON form when it parses as an array of strings, otherwise shell form (as Docker).
fn command(line: usize, rest: &str) -> Result<Command, DockerfileError> {
    if rest.starts_with('[') {
        if let Ok(argv) = serde_json::from_str::<Vec<String>>(rest) {
            if argv.is_empty() {
                return Err(err(line, "an empty JSON command"));
            }
            return Ok(Command::Exec(argv));
        }
    }
    if rest.is_empty() {
        return Err(err(line, "a command is needed"));
    }
    Ok(Command::Shell(rest.to_owned()))
}

fn copy_spec(line: usize, name: &str, rest: &str) -> Result<CopySpec, DockerfileError> {
    let mut chown = None;
    let mut chmod = None;
    let mut rest = rest;
    while let Some(flag) = rest.strip_prefix("--") {
        let (flag, after) = flag.split_once(char::is_whitespace).unwrap_or((flag, ""));
        rest = after.trim_start();
        let (key, value) = flag.split_once('=').unwrap_or((flag, ""));
        match key {
            "chown" => {
                let (u, g) = value.split_once(':').unwrap_or((value, value));
                match (u.parse(), g.parse()) {
                    (Ok(u), Ok(g)) => chown = Some((u, g)),
                    _ => {
                        return Err(err(
                            line,
                            format!("{name} --chown takes numeric UID[:GID], not {value:?}"),
                        ))
                    }
                }
            }
            "chmod" => match u32::from_str_radix(value, 8) {
                Ok(m) if m <= 0o7777 => chmod = Some(m),
                _ => return Err(err(line, format!("{name} --chmod={value:?} is not octal"))),
            },
            "from" => {
                return Err(err(
                    line,
                    format!("{name} --from (multi-stage builds) is not supported"),
                ))
            }
            other => return Err(err(line, format!("{name} --{other} is not supported"))),
        }
    }
    let mut all = match rest.starts_with('[') {
        true => serde_json::from_str::<Vec<String>>(rest)
            .map_err(|e| err(line, format!("{name}: bad JSON form: {e}")))?,
        false => words(line, rest)?,
    };
    if all.len() < 2 {
        return Err(err(line, format!("{name} needs sources and a destination")));
    }
    let dest = all.pop().unwrap_or_default();
    Ok(CopySpec {
        sources: all,
        dest,
        chown,
        chmod,
    })
}

/// `KEY=VALUE …` (quotes allowed), or the legacy `KEY VALUE…` for one pair.
fn pairs(line: usize, name: &str, rest: &str) -> Result<Vec<(String, String)>, DockerfileError> {
    let first = rest.split_whitespace().next().unwrap_or("");
    if !first.contains('=') {
        let (k, v) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
        valid_key(line, name, k)?;
        if v.trim().is_empty() {
            return Err(err(line, format!("{name} {k} needs a value")));
        }
        return Ok(vec![(k.to_owned(), v.trim().to_owned())]);
    }
    let mut out = Vec::new();
    for w in words(line, rest)? {
        let Some((k, v)) = w.split_once('=') else {
            return Err(err(line, format!("{name}: {w:?} is not KEY=VALUE")));
        };
        valid_key(line, name, k)?;
        out.push((k.to_owned(), v.to_owned()));
    }
    Ok(out)
}

/// Splits on unquoted whitespace; quotes are removed, `\` escapes the next character
/// (outside single quotes). `$` references are left for [`expand`].
pub fn words(line: usize, text: &str) -> Result<Vec<String>, DockerfileError> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut quote: Option<char> = None;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some('"') | None, '\\') => {
                in_word = true;
                match chars.next() {
                    Some(n) => cur.push(n),
                    None => cur.push('\\'),
                }
            }
            (Some(_), c) => cur.push(c),
            (None, '"' | '\'') => {
                quote = Some(c);
                in_word = true;
            }
            (None, c) if c.is_whitespace() => {
                if in_word {
                    out.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            (None, c) => {
                cur.push(c);
                in_word = true;
            }
        }
    }
    if quote.is_some() {
        return Err(err(line, "unterminated quote"));
    }
    if in_word {
        out.push(cur);
    }
    Ok(out)
}

/// Substitutes `$NAME`, `${NAME}`, `${NAME:-default}` and `${NAME:+alt}` from `vars`
/// (unset names become empty); `\$` stays a literal `$`.
pub fn expand(
    line: usize,
    text: &str,
    vars: &dyn Fn(&str) -> Option<String>,
) -> Result<String, DockerfileError> {
    let mut out = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\' && chars.peek() == Some(&'$') {
            out.push('$');
            chars.next();
            continue;
        }
        if c != '$' {
            out.push(c);
            continue;
        }
        if chars.peek() == Some(&'{') {
            chars.next();
            let mut inner = String::new();
            loop {
                match chars.next() {
                    Some('}') => break,
                    Some(ch) => inner.push(ch),
                    None => return Err(err(line, format!("unterminated ${{{inner}"))),
                }
            }
            let (name, op) = match inner.find(':') {
                Some(i) => (&inner[..i], Some(&inner[i..])),
                None => (inner.as_str(), None),
            };
            let value = vars(name).filter(|v| !v.is_empty());
            match op {
                None => out.push_str(&value.unwrap_or_default()),
                Some(op) if op.starts_with(":-") => {
                    out.push_str(&value.unwrap_or_else(|| op[2..].to_owned()))
                }
                Some(op) if op.starts_with(":+") => {
                    if value.is_some() {
                        out.push_str(&op[2..]);
                    }
                }
                Some(op) => return Err(err(line, format!("unsupported substitution {op:?}"))),
            }
            continue;
        }
        let mut name = String::new();
        while let Some(&ch) = chars.peek() {
            if ch.is_ascii_alphanumeric() || ch == '_' {
                name.push(ch);
                chars.next();
            } else {
                break;
            }
        }
        match name.is_empty() {
            true => out.push('$'),
            false => out.push_str(&vars(&name).unwrap_or_default()),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continuations_comments_and_both_forms() {
        let text = "# syntax comment\nARG BASE=default\nFROM $BASE\n\nRUN echo a \\\n  # inside\n  && echo b\nRUN [\"/bin/echo\", \"x y\"]\nENV A=1 B=\"two words\"\nENV LEGACY some value\nCOPY --chown=1000:1000 a b /dst/\nLABEL \"k.x\"=v\nworkdir /srv\n";
        let got = parse(text).expect("parses");
        let kinds: Vec<&Kind> = got.iter().map(|i| &i.kind).collect();
        assert_eq!(kinds[1], &Kind::From("$BASE".into()));
        assert_eq!(
            kinds[2],
            &Kind::Run(Command::Shell("echo a && echo b".into()))
        );
        assert_eq!(got[2].line, 5);
        assert_eq!(
            kinds[3],
            &Kind::Run(Command::Exec(vec!["/bin/echo".into(), "x y".into()]))
        );
        assert_eq!(
            kinds[4],
            &Kind::Env(vec![
                ("A".into(), "1".into()),
                ("B".into(), "two words".into())
            ])
        );
        assert_eq!(
            kinds[5],
            &Kind::Env(vec![("LEGACY".into(), "some value".into())])
        );
        assert_eq!(
            kinds[6],
            &Kind::Copy(CopySpec {
                sources: vec!["a".into(), "b".into()],
                dest: "/dst/".into(),
                chown: Some((1000, 1000)),
                chmod: None,
            })
        );
        assert_eq!(kinds[7], &Kind::Label(vec![("k.x".into(), "v".into())]));
        assert_eq!(kinds[8], &Kind::Workdir("/srv".into()));
    }

    #[test]
    fn refusals_name_the_instruction_and_line() {
        let e = parse("FROM default\nRUN true\nEXPOSE 80\n").unwrap_err();
        assert_eq!(e.line, 3);
        assert!(e.message.contains("EXPOSE"), "{e}");
        let e = parse("FROM default\nFROBNICATE x\n").unwrap_err();
        assert_eq!((e.line, e.message.contains("FROBNICATE")), (2, true));
        let e = parse("FROM a AS b\n").unwrap_err();
        assert!(e.message.contains("multi-stage"), "{e}");
        let e = parse("FROM a\nFROM b\n").unwrap_err();
        assert_eq!(e.line, 2);
        let e = parse("FROM a\nCOPY --from=x a /b\n").unwrap_err();
        assert!(e.message.contains("--from"), "{e}");
        assert!(parse("RUN true\n").is_err());
        assert!(parse("FROM a\nRUN true \\\n").is_err());
        assert!(parse("FROM a\nENV A=\"open\n").is_err());
    }

    #[test]
    fn substitution() {
        let vars = |n: &str| match n {
            "A" => Some("1".to_owned()),
            "E" => Some(String::new()),
            _ => None,
        };
        assert_eq!(expand(1, "$A-${A}-$B-x", &vars).unwrap(), "1-1--x");
        assert_eq!(expand(1, "${B:-d}${A:-d}${E:-e}", &vars).unwrap(), "d1e");
        assert_eq!(expand(1, "${A:+y}${B:+y}", &vars).unwrap(), "y");
        assert_eq!(expand(1, "\\$A $ cost", &vars).unwrap(), "$A $ cost");
        assert!(expand(1, "${A", &vars).is_err());
    }
}
