#!/usr/bin/env python3
"""Man pages and bash completion for `kev`, generated from the built binary's --help.

    cli_docs.py --kev build/kev --version 0.1.0 --out DIR [EMULATOR...]

writes DIR/man1/kev.1, DIR/man1/kev-<command>.1 (one per subcommand) and DIR/kev.bash. The
--help text is CLI11's: "Usage:" line, sections ("Options:", "Subcommands:") whose entries start
at column 2 with their description after a gap of two or more spaces, continuation lines
indented deeper. Generated at build time, so the pages cannot drift from the options.
"""
import argparse
import datetime
import os
import re
import subprocess
import sys
import time


def run_help(cmd):
    out = subprocess.run(cmd + ["--help"], capture_output=True, text=True, check=True,
                         env=dict(os.environ, COLUMNS="200"))
    return out.stdout


def parse(text):
    """-> (summary lines, usage, {section: [(names, description)]})"""
    summary, usage, sections, current = [], "", {}, None
    for line in text.splitlines():
        if not line.strip():
            continue
        if line.startswith("Usage:"):
            usage = line[len("Usage:"):].strip()
        elif not line.startswith(" ") and line.rstrip().endswith(":"):
            current = line.rstrip()[:-1]
            sections[current] = []
        elif current is None:
            summary.append(line.strip())
        elif re.match(r"^  \S", line):
            parts = re.split(r"\s{2,}", line.strip(), maxsplit=1)
            sections[current].append([parts[0], parts[1] if len(parts) > 1 else ""])
        elif sections.get(current):
            entry = sections[current][-1]
            entry[1] = (entry[1] + " " + line.strip()).strip()
    return summary, usage, sections


def roff(text):
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return re.sub(r"^([.'])", r"\\&\1", text, flags=re.M)


def option_names(spec):
    """'-q,--quiet' / '--bundle TEXT REQUIRED' -> (['-q', '--quiet'], 'TEXT REQUIRED')"""
    names, _, rest = spec.partition(" ")
    return [n for n in names.split(",") if n.startswith("-")], rest.strip()


def man_page(name, title, summary, usage, sections, version, see_also):
    date = datetime.datetime.fromtimestamp(  # reproducible builds set SOURCE_DATE_EPOCH
        int(os.environ.get("SOURCE_DATE_EPOCH") or time.time()), datetime.timezone.utc)
    lines = [
        f'.TH "{name.upper()}" 1 "{date:%Y-%m-%d}" "kev {version}" "User Commands"',
        ".SH NAME", f"{roff(name)} \\- {roff(title)}",
        ".SH SYNOPSIS", f"\\fB{roff(usage.split(' ')[0])}\\fR {roff(' '.join(usage.split(' ')[1:]))}",
        ".SH DESCRIPTION", roff(" ".join(summary)),
    ]
    for section, entries in sections.items():
        lines.append(f".SH {roff(section.upper())}")
        for spec, desc in entries:
            names, rest = option_names(spec)
            head = ", ".join(f"\\fB{roff(n)}\\fR" for n in names) if names else f"\\fB{roff(spec)}\\fR"
            if names and rest:
                head += f" \\fI{roff(rest)}\\fR"
            lines += [".TP", head, roff(desc) if desc else ""]
    lines += [".SH EXIT STATUS",
              "0 success, 2 bad input, 3 integrity, 4 input/output, 5 unsupported, 6 overload, "
              "130 interrupted, 70 internal error.",
              ".SH SEE ALSO", ", ".join(f"\\fB{roff(s)}\\fR(1)" for s in see_also),
              "and /usr/share/doc/kev\\-native/."]
    return "\n".join(lines) + "\n"


VALUE_TYPES = re.compile(r"^(TEXT|INT|UINT|FLOAT|NUMBER|FILE|DIR|PATH|ENUM|[A-Z_]+)\b")


def completion(commands, global_opts):
    """A bash completion function: subcommands, each one's options, values of {a,b} options."""
    out = ["# bash completion for kev (generated from kev --help by cmake/cli_docs.py)",
           "_kev() {",
           "  local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} cmd= i",
           "  for ((i = 1; i < COMP_CWORD; i++)); do",
           "    case ${COMP_WORDS[i]} in -*) ;; *) cmd=${COMP_WORDS[i]}; break ;; esac",
           "  done",
           "  local opts values",
           "  case $cmd in",
           f"    '') opts='{' '.join(global_opts)} {' '.join(sorted(commands))}' ;;"]
    for name, opts in sorted(commands.items()):
        flags = " ".join(n for names, _ in opts for n in names)
        out.append(f"    {name}) opts='{flags}'")
        out.append("      case $prev in")
        for names, rest in opts:
            if not rest or not VALUE_TYPES.match(rest):
                continue
            choice = re.search(r"\{([^}]*)\}", rest)
            pattern = "|".join(names)
            if choice:
                vals = " ".join(v.strip() for v in choice.group(1).split(","))
                out.append(f"        {pattern}) COMPREPLY=($(compgen -W '{vals}' -- \"$cur\")); return ;;")
            else:
                out.append(f"        {pattern}) COMPREPLY=($(compgen -f -- \"$cur\")); return ;;")
        out.append("      esac ;;")
    out += ["  esac",
            "  COMPREPLY=($(compgen -W \"$opts\" -- \"$cur\"))",
            "}",
            "complete -o default -F _kev kev",
            ""]
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kev", required=True)
    ap.add_argument("--version", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("emulator", nargs="*")
    a = ap.parse_args()
    kev = a.emulator + [a.kev]
    man_dir = os.path.join(a.out, "man1")
    os.makedirs(man_dir, exist_ok=True)
    summary, usage, sections = parse(run_help(kev))
    subcommands = {spec: desc for spec, desc in sections.get("Subcommands", [])}
    if not subcommands:
        sys.exit("cli_docs: kev --help lists no subcommands")
    usage = usage.replace(a.kev, "kev")
    global_opts = [n for spec, _ in sections.get("Options", []) for n in option_names(spec)[0]]
    pages = {"kev.1": man_page("kev", summary[0].partition(": ")[2] or summary[0], summary, usage,
                               sections, a.version, [f"kev-{c}" for c in subcommands])}
    commands = {}
    for cmd, desc in subcommands.items():
        s_summary, s_usage, s_sections = parse(run_help(kev + [cmd]))
        s_usage = s_usage.replace(a.kev, "kev")
        pages[f"kev-{cmd}.1"] = man_page(f"kev-{cmd}", desc, s_summary or [desc], s_usage,
                                         s_sections, a.version, ["kev"])
        commands[cmd] = [option_names(spec) for spec, _ in s_sections.get("Options", [])]
    for name in os.listdir(man_dir):  # a removed command leaves no stale page
        if name not in pages:
            os.remove(os.path.join(man_dir, name))
    for name, text in pages.items():
        with open(os.path.join(man_dir, name), "w") as f:
            f.write(text)
    with open(os.path.join(a.out, "kev.bash"), "w") as f:
        f.write(completion(commands, global_opts))


if __name__ == "__main__":
    main()
