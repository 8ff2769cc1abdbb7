"""Which risky things a shell command line does, read from its text: the classifier behind
``delegation.approvals`` (``offload.approvals``).

``classify(command, workspace)`` splits the line the way ``/bin/sh`` would at the level that
matters here (``shlex`` with the shell's operators: pipes, ``&&``, ``||``, ``;``, ``&``,
subshells and ``$(...)``, redirections; ``VAR=value`` prefixes; wrappers such as ``sudo``,
``env``, ``nohup``, ``timeout``, ``xargs``; the script of ``bash -c '...'``/``sh -c``/``eval``
is classified in turn) and looks every simple command up in the tables below. Each finding
names a category of ``CATEGORIES`` and says why, in words for the model and the person asked.

Decisions (docs/approvals.md): removing a single file or folder inside the workspace (``rm
notes.txt``, ``rmdir build``) is ordinary work and not flagged, but ``rm -r``/``-R`` is
destructive wherever it points; ``>`` onto a file inside the workspace is ordinary work too
(``pytest > log`` run twice, like a ``write_file``; a write outside the workspace is flagged as
such); ``/dev/null`` and the standard streams are never targets.

Invariants: pure (reads the file system only to resolve where a target path lands and whether
it exists; never runs anything); a line that cannot be split (an unclosed quote, nesting
deeper than ``MAX_DEPTH``) is the most cautious answer, category ``unparseable``; what a
program does inside itself (``python -c``, a script) is not seen: this is a check of the text,
not a sandbox.
"""
from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

DESTRUCTIVE, PRIVILEGE, NETWORK, PACKAGE_INSTALL, OUTSIDE_WORKSPACE, UNPARSEABLE = (
    "destructive", "privilege", "network", "package_install", "outside_workspace", "unparseable")
CATEGORIES: dict[str, str] = {
    DESTRUCTIVE: "destructive file operations (rm -r, find -delete, shred, dd of=, mkfs, truncate)",
    PRIVILEGE: "privilege changes (sudo, su, chown, chmod of system paths, setuid bits, mount, systemctl)",
    NETWORK: "network transfers (curl, wget, nc, scp, rsync to a host, ssh, git push, /dev/tcp)",
    PACKAGE_INSTALL: "package installs (pip, npm, apt, cargo, gem, go install …)",
    OUTSIDE_WORKSPACE: "writes outside the workspace (redirects, cp/mv/tee/touch targets)",
    UNPARSEABLE: "command lines that cannot be read safely (an unclosed quote, deep nesting)",
}
MAX_DEPTH = 4  # bash -c 'bash -c "..."' nesting followed before a line is judged unparseable

_SEPARATORS = frozenset({"|", "||", "&&", ";", "&", "|&", ";;", "(", ")", "((", "))", ";&", ";;&"})
_WRITE_REDIRECTS = frozenset({">", ">>", ">|", "&>", "&>>", ">&"})
_READ_REDIRECTS = frozenset({"<", "<>", "<<<", "<&"})
_HARMLESS_TARGETS = ("/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty", "/dev/fd/")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_HEREDOC = re.compile(r"<<-?\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\1")
# Wrappers run the rest of their words as a command; the number is how many words of their own
# they take after the options (timeout DURATION, nice's -n N is an option with a value).
_WRAPPERS = {"nohup": 0, "time": 0, "exec": 0, "command": 0, "builtin": 0, "stdbuf": 0, "ionice": 0,
             "nice": 0, "timeout": 1, "xargs": 0, "env": 0, "setsid": 0, "chronic": 0, "unbuffer": 0}
_OPTION_VALUES = {"nice": {"-n"}, "xargs": {"-I", "-n", "-P", "-d", "-L", "-s", "-E", "-a"},
                  "timeout": {"-s", "-k", "--signal", "--kill-after"}, "env": {"-u", "-C", "-S"},
                  "ionice": {"-c", "-n", "-p"}, "stdbuf": {"-i", "-o", "-e"}}
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "ash", "busybox"})
_ELEVATE = frozenset({"sudo", "su", "doas", "pkexec", "runuser", "sg"})
_PRIVILEGED = frozenset({"mount", "umount", "setcap", "usermod", "useradd", "userdel", "groupadd", "passwd",
                         "visudo", "chroot", "insmod", "rmmod", "modprobe", "systemctl", "service", "sysctl",
                         "iptables", "nft", "chattr"})
_ALWAYS_DESTRUCTIVE = frozenset({"shred", "wipefs", "fdisk", "sfdisk", "parted", "mkswap", "blkdiscard", "srm"})
_NETWORK = frozenset({"curl", "wget", "nc", "ncat", "netcat", "socat", "scp", "sftp", "ftp", "ssh", "telnet",
                      "rclone", "aria2c", "http", "https", "xh", "lftp", "tftp", "smbclient"})
# command -> its subcommands that install (empty: the command always installs).
_INSTALLERS: dict[str, frozenset[str]] = {
    "pip": frozenset({"install", "download"}), "pip3": frozenset({"install", "download"}),
    "pipx": frozenset({"install", "inject", "run"}), "uv": frozenset({"add", "install", "sync"}),
    "npm": frozenset({"install", "i", "add", "ci", "exec", "x"}), "npx": frozenset(),
    "yarn": frozenset({"add", "install", "dlx"}), "pnpm": frozenset({"add", "install", "i", "dlx"}),
    "bun": frozenset({"add", "install", "i", "x"}), "apt": frozenset({"install", "reinstall"}),
    "apt-get": frozenset({"install", "reinstall", "build-dep"}), "aptitude": frozenset({"install"}),
    "dpkg": frozenset({"-i", "--install"}), "dnf": frozenset({"install", "reinstall"}),
    "yum": frozenset({"install", "reinstall"}), "zypper": frozenset({"install", "in"}),
    "pacman": frozenset({"-S", "-U", "-Sy", "-Syu"}), "apk": frozenset({"add"}), "brew": frozenset({"install"}),
    "cargo": frozenset({"install", "add"}), "gem": frozenset({"install"}), "go": frozenset({"install", "get"}),
    "conda": frozenset({"install", "create"}), "mamba": frozenset({"install", "create"}),
    "poetry": frozenset({"add", "install"}), "composer": frozenset({"require", "install"}),
    "snap": frozenset({"install"}), "flatpak": frozenset({"install"}), "easy_install": frozenset(),
}
_WRITERS = frozenset({"touch", "mkdir", "rmdir", "rm", "unlink", "truncate", "tee", "chmod", "chown", "chgrp",
                      "shred", "ln", "install"})
_COPIERS = frozenset({"cp", "mv", "rsync", "install", "ln"})  # the last operand is the destination
_SYSTEM_PREFIXES = ("/etc", "/usr", "/bin", "/sbin", "/lib", "/boot", "/var", "/opt", "/root", "/sys", "/proc",
                    "/dev", "/srv", "/home")


@dataclass(frozen=True)
class Finding:
    category: str
    reason: str


@dataclass(frozen=True)
class Classification:
    """What ``classify`` found: nothing for a benign command."""

    command: str
    findings: tuple[Finding, ...] = ()

    @property
    def categories(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(f.category for f in self.findings))

    def reasons(self, category: str | None = None) -> list[str]:
        return list(dict.fromkeys(f.reason for f in self.findings if category in (None, f.category)))


@dataclass
class _Scan:
    workspace: Path
    cwd: Path
    home: Path
    found: list[Finding] = field(default_factory=list)

    def add(self, category: str, reason: str) -> None:
        self.found.append(Finding(category, reason))


def classify(command: str, workspace: str | os.PathLike[str], home: str | os.PathLike[str] | None = None) -> Classification:
    """The categories ``command`` falls in, run from ``workspace`` (``home``: what ``~`` means)."""
    root = Path(os.path.realpath(workspace))
    scan = _Scan(root, root, Path(home) if home is not None else Path.home())
    _scan_line(command, scan, depth=0)
    unique = tuple(dict.fromkeys(scan.found))
    return Classification(command, unique)


def _scan_line(line: str, scan: _Scan, depth: int) -> None:
    if depth > MAX_DEPTH:
        scan.add(UNPARSEABLE, f"shells nested more than {MAX_DEPTH} deep")
        return
    try:
        tokens = _tokens(line)
    except ValueError as exc:
        scan.add(UNPARSEABLE, f"the line cannot be split like the shell would ({exc})")
        return
    for inner in _substitutions(line):  # $(...) and `...` run too, even inside double quotes
        _scan_line(inner, scan, depth + 1)
    for words, redirects in _segments(tokens):
        _scan_redirects(redirects, scan)
        _scan_command(words, scan, depth)


def _tokens(line: str) -> list[str]:
    """The line's words and operators; heredoc bodies dropped, backticks read as ``$(...)``."""
    line = _drop_heredoc_bodies(line).replace("`", " ( ").replace("\n", " ; ")
    lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|()<>")
    lexer.whitespace_split = True
    lexer.commenters = ""  # a '#' inside a word (a URL fragment) is not a comment; cautious either way
    return list(lexer)


def _substitutions(line: str) -> list[str]:
    """The scripts of the line's ``$(...)`` and backticks (quoting ignored: cautious)."""
    found = re.findall(r"`([^`]*)`", line)
    start = line.find("$(")
    while start != -1:
        depth, end = 0, start + 1
        while end < len(line):
            depth += {"(": 1, ")": -1}.get(line[end], 0)
            if depth == 0:
                break
            end += 1
        found.append(line[start + 2:end])
        start = line.find("$(", start + 2)
    return [inner for inner in found if inner.strip() and not inner.startswith("(")]  # $(( )) is arithmetic


def _drop_heredoc_bodies(line: str) -> str:
    lines, kept, closing = line.split("\n"), [], None
    for text in lines:
        if closing is not None:
            if text.strip() == closing:
                closing = None
            continue
        kept.append(text)
        match = _HEREDOC.search(text)
        if match:
            closing = match.group(2)
    return "\n".join(kept)


def _segments(tokens: list[str]) -> list[tuple[list[str], list[tuple[str, str]]]]:
    """Simple commands: their words and their ``(operator, target)`` redirections."""
    segments: list[tuple[list[str], list[tuple[str, str]]]] = [([], [])]
    index = 0
    while index < len(tokens):
        token = tokens[index]
        words, redirects = segments[-1]
        if token in _SEPARATORS:
            segments.append(([], []))
        elif token in _WRITE_REDIRECTS or token in _READ_REDIRECTS or token in ("<<", "<<-"):
            if words and words[-1].isdigit():
                words.pop()  # the file descriptor of "2>"
            target = tokens[index + 1] if index + 1 < len(tokens) else ""
            redirects.append((token, target))
            index += 1
        elif token == "$" or (token.endswith("$") and index + 1 < len(tokens) and tokens[index + 1] == "("):
            segments.append(([], []))  # "$(": what follows is a command of its own
        else:
            words.append(token)
        index += 1
    return [segment for segment in segments if segment[0] or segment[1]]


def _scan_redirects(redirects: list[tuple[str, str]], scan: _Scan) -> None:
    for operator, target in redirects:
        if target.startswith("/dev/tcp/") or target.startswith("/dev/udp/"):
            scan.add(NETWORK, f"redirects to a network socket ({target})")
        elif operator in _WRITE_REDIRECTS and not (operator == ">&" and (target.isdigit() or target == "-")):
            _write_target(target, scan, f"redirects output to {target}")


def _scan_command(words: list[str], scan: _Scan, depth: int) -> None:
    words = _unwrap(words, scan)
    if not words:
        return
    name, args = os.path.basename(words[0]), words[1:]
    if name in ("{", "}", "!", "then", "do", "else", "if", "while", "until"):
        _scan_command(args, scan, depth)
    elif name in _SHELLS or name == "eval":
        _scan_shell(name, args, scan, depth)
    elif name == "cd":
        _change_dir(args, scan)
    else:
        _scan_simple(name, args, scan)


def _unwrap(words: list[str], scan: _Scan) -> list[str]:
    """Drop ``VAR=value`` prefixes and wrappers; note privilege changes (sudo …) on the way."""
    while words:
        head = os.path.basename(words[0])
        if _ASSIGNMENT.match(words[0]):
            words = words[1:]
        elif head in _ELEVATE:
            scan.add(PRIVILEGE, f"runs as another user ({head})")
            words = _skip_options(words[1:], {"-u", "-g", "-c", "-U", "-C", "-p", "-s"} if head != "su" else set())
            if head == "su":
                return []  # su USER: an interactive shell; su -c is covered by the privilege finding
        elif head in _WRAPPERS:
            rest = _skip_options(words[1:], _OPTION_VALUES.get(head, set()))
            rest = [w for w in rest if not (head == "env" and _ASSIGNMENT.match(w))]
            words = rest[_WRAPPERS[head]:]
        else:
            return words
    return words


def _skip_options(words: list[str], with_value: set[str]) -> list[str]:
    index = 0
    while index < len(words) and words[index].startswith("-") and words[index] != "-":
        index += 2 if words[index] in with_value else 1
    return words[index:]


def _scan_shell(name: str, args: list[str], scan: _Scan, depth: int) -> None:
    if name == "eval":
        _scan_line(" ".join(args), scan, depth + 1)
        return
    for index, word in enumerate(args):
        if word.startswith("-") and "c" in word.lstrip("-") and not word.startswith("--"):
            if index + 1 < len(args):
                _scan_line(args[index + 1], scan, depth + 1)
            return
    # a script file or commands on stdin: what it does is not in this line


def _change_dir(args: list[str], scan: _Scan) -> None:
    target = next((a for a in args if not a.startswith("-")), None)
    if target is None or target == "-" or "$" in target:
        scan.cwd = scan.home  # 'cd', 'cd -', 'cd $X': assume somewhere outside; relative paths follow
    else:
        scan.cwd = _resolve(target, scan)


def _scan_simple(name: str, args: list[str], scan: _Scan) -> None:
    operands = [a for a in args if not a.startswith("-") or a == "-"]
    _scan_destructive(name, args, operands, scan)
    _scan_privilege(name, args, operands, scan)
    _scan_network(name, args, operands, scan)
    _scan_install(name, args, scan)
    _scan_writes(name, args, operands, scan)


def _scan_destructive(name: str, args: list[str], operands: list[str], scan: _Scan) -> None:
    flags = "".join(a.lstrip("-") for a in args if a.startswith("-") and not a.startswith("--"))
    if name == "rm" and ("r" in flags or "R" in flags or "--recursive" in args):
        scan.add(DESTRUCTIVE, f"removes folders recursively (rm -r {' '.join(operands)})".replace(" )", ")"))
    elif name == "find" and ("-delete" in args or _find_exec_rm(args)):
        scan.add(DESTRUCTIVE, "deletes what find matches (find -delete / -exec rm)")
    elif name in _ALWAYS_DESTRUCTIVE or name.startswith("mkfs"):
        scan.add(DESTRUCTIVE, f"{name} destroys data")
    elif name == "dd" and any(a.startswith("of=") for a in args):
        scan.add(DESTRUCTIVE, "dd writes raw data over its of= target")
    elif name == "truncate":
        scan.add(DESTRUCTIVE, "truncate cuts files")
    elif name == "git" and _git_destructive(args):
        scan.add(DESTRUCTIVE, f"git {' '.join(args[:3])} throws away work")
    elif name == "rsync" and any(a.startswith("--delete") for a in args):
        scan.add(DESTRUCTIVE, "rsync --delete removes files at the destination")


def _find_exec_rm(args: list[str]) -> bool:
    return any(a in ("-exec", "-execdir", "-ok") and i + 1 < len(args) and os.path.basename(args[i + 1]) in
               ("rm", "shred", "unlink") for i, a in enumerate(args))


def _git_destructive(args: list[str]) -> bool:
    sub = next((a for a in args if not a.startswith("-")), "")
    return (sub == "clean" and any(a.startswith("-") and "f" in a for a in args)) or (
        sub == "reset" and "--hard" in args) or (sub == "push" and any(a in ("-f", "--force") for a in args))


def _scan_privilege(name: str, args: list[str], operands: list[str], scan: _Scan) -> None:
    if name in _PRIVILEGED:
        scan.add(PRIVILEGE, f"{name} changes the system")
    elif name in ("chown", "chgrp"):
        scan.add(PRIVILEGE, f"{name} changes who owns files")
    elif name == "chmod" and operands:
        mode, targets = operands[0], operands[1:]
        if re.search(r"[ugoa]*[+=][rwxXt]*s", mode) or re.fullmatch(r"0*[2467][0-7]{3}", mode):
            scan.add(PRIVILEGE, f"chmod {mode} sets a setuid/setgid bit")
        for target in targets:
            if _is_system_path(_resolve(target, scan)):
                scan.add(PRIVILEGE, f"chmod changes the permissions of the system path {target}")


def _scan_network(name: str, args: list[str], operands: list[str], scan: _Scan) -> None:
    if name in _NETWORK:
        scan.add(NETWORK, f"{name} talks to another host")
    elif name == "rsync" and any(_remote(o) for o in operands):
        scan.add(NETWORK, "rsync copies to or from another host")
    elif name == "git" and next((a for a in args if not a.startswith("-")), "") in ("push", "send-email"):
        scan.add(NETWORK, "git push sends the repository to a remote")


def _remote(operand: str) -> bool:
    return operand.startswith("rsync://") or bool(re.match(r"^[^/]*[^/\\]:", operand))


def _scan_install(name: str, args: list[str], scan: _Scan) -> None:
    if name.startswith("python") and args[:2] == ["-m", "pip"]:
        name, args = "pip", args[2:]
    elif name == "uv" and args[:1] in (["pip"], ["tool"]):
        name, args = "pip", args[1:]
    subcommands = _INSTALLERS.get(name)
    if subcommands is None:
        return
    sub = next((a for a in args if not a.startswith("-") or a in subcommands), None)
    if not subcommands or sub in subcommands:
        scan.add(PACKAGE_INSTALL, f"{name} {sub or ''} installs packages".replace("  ", " "))


def _scan_writes(name: str, args: list[str], operands: list[str], scan: _Scan) -> None:
    if name in _COPIERS and len(operands) >= 2:
        _write_target(operands[-1], scan, f"{name} writes to {operands[-1]}")
        if name == "mv":
            for source in operands[:-1]:
                _write_target(source, scan, f"mv moves {source} away")
    elif name in _WRITERS:
        targets = operands[1:] if name in ("chmod", "chown", "chgrp") else operands
        if name == "truncate":
            targets = _skip_options(args, {"-s", "--size", "-r", "--reference"})
        for target in targets:
            _write_target(target, scan, f"{name} changes {target}")
    elif name == "sed" and any(a.startswith("-i") or a == "--in-place" for a in args):
        for target in operands[1:]:
            _write_target(target, scan, f"sed -i edits {target}")
    elif name == "dd":
        for arg in args:
            if arg.startswith("of="):
                _write_target(arg[3:], scan, f"dd writes to {arg[3:]}")


def _write_target(raw: str, scan: _Scan, what: str) -> None:
    if not raw:
        return
    if raw.startswith(_HARMLESS_TARGETS):
        return
    if "$" in raw:
        scan.add(OUTSIDE_WORKSPACE, f"{what}: a path built at run time, which may lie outside the workspace")
        return
    path = _resolve(raw, scan)
    if path != scan.workspace and not path.is_relative_to(scan.workspace):
        scan.add(OUTSIDE_WORKSPACE, f"{what}, outside the workspace ({path})")


def _resolve(raw: str, scan: _Scan) -> Path:
    text = raw.split("*", 1)[0].split("?", 1)[0] or "."  # a glob's fixed part says where it lands
    if text == "~" or text.startswith("~/"):
        path = scan.home / text[2:]
    elif text.startswith("~"):
        path = Path("/home") / text[1:]  # ~user: someone's home, never this workspace
    else:
        path = Path(text) if os.path.isabs(text) else scan.cwd / text
    return Path(os.path.realpath(path))


def _is_system_path(path: Path) -> bool:
    return str(path) == "/" or any(str(path) == p or str(path).startswith(p + "/") for p in _SYSTEM_PREFIXES)
