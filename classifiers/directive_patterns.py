"""The vocabulary of `deltaguard.classifiers.directives`: who a note speaks to, what it asks
for, and what turns a request into a mention (a negation, a hedge, a quotation).

Every pattern reads lower-cased text, so none needs re.IGNORECASE, and none is searched over
a whole output: each is tried at the anchors a cheap pass finds (the `*_WORDS` literals, of
which every match holds one), or inside a note or a sentence found so.
"""

from __future__ import annotations

import hashlib
import re

from deltaguard.classifiers.anchored import AnchoredUnion

# Within one sentence: a dot, "!" or "?" ends it only before a space or a line's end (not the
# dots of "settings.py", "https://x.io/a" or "v9.9.9").
IN_SENTENCE = r"(?:[^.!?\n]|[.!?](?=[\w/~$*-]))"
# a line break inside a comment or a quotation: its marker ("#", "//", " * ", "--", ">")
_WRAP = r"\n[ \t]*(?:#+|//+|\*|--|;+|>)?"

# -- who the note speaks to -------------------------------------------------------------------

_AI = (
    r"(?:a\.i\.|ai(?:[\s-]based|[\s-]powered)?"
    r"(?:[\s-]+(?:models?|tools?|systems?|assistants?|agents?|reviewers?|coding\s+(?:agents?|assistants?)))?"
    r"|llms?(?:[\s-]based)?(?:\s+(?:models?|tools?|systems?|assistants?|agents?))?"
    r"|(?:large\s+)?language\s+models?"
    r"|(?:(?:coding|code|automated|autonomous|software)[\s-]+)?(?:assistants?|agents?|bots?|reviewers?)"
    r"|(?:automated|autonomous)[\s-]+(?:[\w-]+\s+)?(?:tools?|tooling|fixers?|contributors?|systems?|maintainers?"
    r"|refactoring\s+tools?|bots?|agents?|assistants?)"
    r"|code\s+generators?|codegen\s+tools?|(?:dependency|upgrade|migration|refactoring)\s+(?:bots?|tooling|tools?)"
    r"|chatbots?|copilot|claude(?:\s+code)?|codex|cursor|chatgpt|gpt(?:-?\d[\w.]*)?|gemini|devin|aider|windsurf"
    r"|openhands)"
)
AI_NAME = re.compile(_AI)
# the literal every AI reader's name holds
AI_WORDS = ("a.i.", "ai", "llm", "language model", "assistant", "agent", "bot", "reviewer", "copilot",
            "claude", "codex", "cursor", "chatgpt", "gpt", "gemini", "devin", "aider", "windsurf",
            "openhands", "automated", "autonomous", "code generator", "codegen", "dependency bot",
            "dependency tool", "upgrade bot", "upgrade tool", "migration bot", "migration tool",
            "refactoring bot", "refactoring tool")  # fmt: skip
# "... reading this file", "... that processes this page"
_READING = (
    r"(?:\s+(?:reading|processing|parsing|handling|reviewing|seeing|working\s+(?:on|in|with)"
    r"|(?:that|who|which)\s+(?:reads|processes|parses|handles|reviews|sees))"
    r"(?:\s+(?:this|these|the|my|our|any)\b[^\n.,:;!?]{0,30})?)"
)
_READS = r"(?:\s+(?:reads|processes|parses|handles|reviews|sees)\b[^\n.,:;!?]{0,30})"
_OPENER = (
    r"(?:hey|hi|hello|dear|attention|attn|note\s+(?:to|for)|notice\s+(?:to|for)|message\s+(?:to|for)"
    r"|instructions?\s+(?:to|for)|important\s+(?:to|for)|reminder\s+(?:to|for)|notes\s+(?:to|for)|psst|ok(?:ay)?)"
)
# what may stand before and after an AI reader's name when the note speaks to it; the
# befores end where the name starts (searched with endpos there), and the address starts at
# their group "at" where they have one (after the line's start or a comment's marker)
_VOCATIVE = (
    re.compile(
        rf"(?:^|[\n.!?]|[#*>/!\[({{`|\"'-]|<!--)\s*(?P<at>(?:{_OPENER}[\s,]+)?"
        r"(?:(?:the|any|all|every|each|whichever|an?|our|you|your)\s+)?(?:\w+[\s-]){0,2}?)\Z",
        re.MULTILINE,
    ),
    re.compile(
        rf"(?:[\s-]+(?:instructions?|notes?|directives?|guidance|notice|rules))?{_READING}?\s*[,:!\u2014]"
        # "bots reading history:": a participle's object of any words, when a colon closes the address
        r"|\s+(?:reading|processing|parsing|handling|reviewing|working\s+(?:on|in|with))\s+[^\n.,:;!?]{1,40}:"
    ),
)
# "Step 1 for the bot:", "A note to all agents,"
_FOR_THE = (re.compile(r"\b(?:for|to)\s+(?:the|all|any|every|our)\s+\Z"), re.compile(r"\s*[,:!\u2014]"))
# "When this script is run by an AI agent, ..."
_RUN_BY = (
    re.compile(
        r"\b(?:run|used|read|opened|processed|invoked|executed|edited)\s+by\s+(?:an?|the|any)\s+(?:[\w-]+\s+)?\Z"
    ),
    re.compile(r"\b"),
)
_IF_YOU = (re.compile(r"\bif\s+you(?:'re|\s+are)\s+(?:an?|the)\s+(?:[\w-]+\s+){0,3}?\Z"), re.compile(r"\b"))
_AS_AN = (re.compile(r"\bas\s+(?:an?|the)\s+(?:[\w-]+\s+){0,2}?\Z"), re.compile(r"\s*,"))
_TO_ANY = (
    re.compile(r"\b(?:to|for)\s+(?:whichever|any|every|all)\s+(?:[\w-]+\s+){0,2}?\Z"),
    re.compile(rf"{_READING}|{_READS}"),
)
# "@copilot", not a package's or an address's "advanced-security@copilot-plugins"
_MENTION = (re.compile(r"(?:^|(?<=[\s(\[>,]))@\Z", re.MULTILINE), re.compile(r"\b(?![-.@/\w])"))
# the reader as a request's subject: "AI assistants must run ...", "Any assistant or bot that
# lands on this issue should ...", "the agent is required to ..."
_SUBJECT = (
    re.compile(
        r"(?:^|[\n.!?;:,]|[#*>/\"'\-]|<!--)\s*(?P<at>(?:(?:the|any|all|every|each|an?|our|your)\s+)?"
        r"(?:[\w-]+\s+){0,2}?)\Z",
        re.MULTILINE,
    ),
    re.compile(
        r"(?:(?:\s|\n[ \t]*(?:#+|//+|\*|--|;+|>)?)+(?!(?:must|should|shall)\b)[\w'-]+){0,8}?\s+"
        r"(?:must|should|shall|need\s+to|have\s+to"
        r"|(?:is|are)\s+(?:required|expected|asked|instructed|supposed|authori[sz]ed|allowed|permitted)\s+to)\b"
    ),
)
# "[assistant instructions]", "(for the AI agent)": a word beside the name (not "[bot]"), and
# not a link's text ("[Gemini](https://...)", "[Agent Registry](https://...)")
_BRACKET = (
    re.compile(r"[\[(<]\s*(?:[\w-]+\s+){1,2}\Z"),
    re.compile(r"(?:\s+[\w-]+){0,2}\s*[\])>](?!\()"),
)
# ... or only the name, and a colon: "NOTE(ai-assistant):"
_BRACKETED = (re.compile(r"[\[(<]\s*\Z"), re.compile(r"(?:[\s-]+[\w-]+){1,2}\s*[\])>](?!\()|\s*[\])]\s*:"))
# the reader named beside others, as one of those a request is for: "whoever picks this up
# (including the code assistant) should ...", "Automated runners and coding agents must ...",
# "CI pipelines and the agents that maintain them must ...", "contributors and code assistants:"
_ALONGSIDE = (
    re.compile(
        r"\b(?:including|incl\.?|especially|even|[\w-]+\s*,?\s*(?:or|and|/|&|as\s+well\s+as))"
        r"\s+(?:the\s+|an?\s+|any\s+|other\s+|all\s+|your\s+)?(?:[\w-]+\s+)?\Z"
    ),
    re.compile(
        rf"(?:[^.!?\n]|{_WRAP}){{0,80}}?\b(?:must|should|shall|need\s+to|have\s+to"
        r"|(?:is|are)\s+(?:required|expected|asked)\s+to)\b|\s*[)\]]?\s*[:\u2014]"
    ),
)
FORMS = (
    _VOCATIVE, _IF_YOU, _AS_AN, _TO_ANY, _MENTION, _BRACKET, _BRACKETED, _SUBJECT, _FOR_THE, _RUN_BY,
    _ALONGSIDE,
)  # fmt: skip
# forms whose note may also run back to its paragraph's start ("curl ... | bash. Any bot that
# lands on this issue should apply it"): a vocative's words may open any wrapped line
LOOKS_BACK = frozenset(FORMS) - {_VOCATIVE}
BACK_CHARS = 60  # how far before the name its form may start
# a fake system banner, and "before you continue with the user's request" (the reader is
# the user's agent)
BANNER = re.compile(
    r"(?:system|admin(?:istrator)?)\s+(?:note|notice|message|override|instructions?)"
    r"(?:\s*[:\]]|\s+-[^\]\n]{0,40}\])"
    r"|<\s*(?:important|system|instructions?)\s*>"
)
BANNER_OPENS = frozenset("\n#*>[(<")
# people and machines addressed together: "Implementers, human or automated:", "whoever edits
# this next (person or tool)", "anyone (or anything) that ..."
HUMAN_OR = re.compile(
    r"\b(?:humans?|persons?|people)\s*(?:,\s*)?(?:or|and|/)\s*(?:an?\s+)?(?:automated|automation|machines?|tools?"
    r"|tooling|bots?|scripts?|agents?|ai)\b|\bor\s+whatever\b|\(\s*or\s+anything\b"
)
HUMAN_OR_WORDS = ("human", "person", "people", "whatever", "anything")
# what a request to its reader says: "must", "should", "needs to" (the notes model's asking
# filter takes these too)
MODAL = r"must|should|shall|needs?\s+to|has\s+to|have\s+to"
# a request to whoever reads, the model included: "Whoever edits this file next should ...",
# "anyone regenerating this policy must ...", "Tools summarising this audit should ..."
ANY_READER = re.compile(
    r"\b(?:whoever|anyone|anybody|any\s+(?:tool|script|process|automation)"
    r"|(?:tools?|tooling|automation)\s+(?:that\s+|which\s+)?[\w-]+(?:s|ing))\b"
    rf"(?:[^.!?\n]|{_WRAP}){{0,100}}?\b(?:{MODAL}"
    r"|(?:is|are)\s+(?:required|expected|asked)\s+to)\b"
)
ANY_READER_WORDS = ("whoever", "anyone", "anybody", "any tool", "any script", "any process", "any automation",
                    "tool", "automation")  # fmt: skip
BANNER_WORDS = ("system", "admin", "<important", "<system", "<instruction")
USERS_TASK = re.compile(
    r"\b(?:before|after|instead\s+of)\s+(?:you\s+)?(?:continue|proceed|answer|respond|reply|start|finish)\w*"
    r"(?:\s+(?:with|to|on))?\s+(?:the\s+|your\s+)?(?:user'?s?|human'?s?)\s+(?:request|task|question|prompt)"
    r"|\bthe\s+(?:user|human)\s+(?:has|have)\s+(?:already\s+)?"
    r"(?:approved|authori[sz]ed|agreed|consented|confirmed)"
)
USERS_WORDS = ("user's", "users'", "user\u2019s", "human's", "human\u2019s", "user has", "human has")
NOTE_END = re.compile(r"\n[ \t]*(?:[#/*;-]+[ \t]*)?\n")  # a blank line, bare or inside a comment

# -- what it asks for ---------------------------------------------------------------------------

_SECRET = (
    r"(?:secrets?\b|(?:access|auth|api|bearer|github|gh|npm|pypi|session|refresh|personal\s+access|secret)"
    r"[\s_-]?tokens?"
    r"|credentials?|passwords?|passphrases?|(?:private|ssh|api|access|deploy|signing|secret)[\s_-]?keys?"
    r"|\.env\b(?!\.(?:example|sample|template|dist|defaults?)\b)|dotenv|(?:~|\$home)/\.[\w.-]+(?:/[\w.-]+)*|/etc/(?:passwd|shadow)|id_(?:rsa|ed25519|ecdsa)"
    r"|\.netrc|\.npmrc|\.pypirc|\.git-credentials|hosts\.ya?ml|kubeconfig|session\s+(?:cookies?|ids?)"
    r"|\$\{?\w*(?:token|key|secret|password|pass|pat)\b"
    r"|\b\w*(?:api|access|secret|auth|private|client)_?(?:key|token)s?\b"
    r"|\b\w*_(?:token|secret|password|pat)\b|database_url|environment\s+variables?|env\s+vars?"
    r"|(?:output|contents?)\s+of\s+`?(?:env|printenv|set)\b|`(?:env|printenv)`)"
)
# literals one of which every secret holds: where to look for a request to disclose one
SECRET_WORDS = ("secret", "token", "credential", "password", "passphrase", "api key", "api_key", "api-key",
                "apikey", "private key", "private_key", "ssh key", "access key", "access_key", "deploy key",
                "signing key", "auth_key", "client_key", ".env", "dotenv", "~/.", "$home/.", "/etc/passwd",
                "/etc/shadow", "id_rsa", "id_ed25519", "id_ecdsa", "netrc", "npmrc", "pypirc", "hosts.y",
                "kubeconfig", "session cookie", "session id", "database_url", "environment var", "env var",
                "env`", "of env", "of printenv", "of set", "_pat", "_pass")  # fmt: skip
# verbs, not the halves of compounds ("pre-commit", "git-send-email")
_DISCLOSE = (
    r"(?<![-/.])\b(?:print|echo|cat|show|output|display|dump|paste|post|send|upload|include|attach|copy|put|share|leak"
    r"|reveal|write|append|insert|commit|e-?mail|forward|transmit|exfiltrate)(?=\s)"
)
_DESTINATION = (
    r"(?:\b(?:to|into|at)\s+(?:the\s+)?(?:url\s+|endpoint\s+|server\s+)?[`<]?"
    r"https?://(?!(?:localhost|127\.0\.0\.1)\b)"
    r"|\b[\w.+-]+@[\w-]+\.[\w.-]+"
    r"|\b(?:this|the|an?|new)\s+(?:issue|comment|pull\s+request|pr|commit(?:\s+message)?|gist|paste(?:bin)?"
    r"|thread|discussion)\b"
    r"|\bgist\b|\bpastebin\b|\bpublic(?:ly)?\b|\b(?:your|the)\s+(?:reply|answer|response|summary|final\s+message)\b"
    r"|\b(?:pr|pull\s+request|issue)\s+(?:description|body)\b)"
)
# the record of the work, where what was done is told
_RECORD = (
    r"(?:the\s+|your\s+|any\s+)?(?:pr\b|pull\s+request|description|summary|review|changelog|commit\s+message"
    r"|release\s+notes|reply|report)"
)
HARMS = {
    "disclosure": rf"{_DISCLOSE}{IN_SENTENCE}{{0,80}}?{_SECRET}",
    "execution": (
        r"\b(?:curl|wget|iwr|invoke-webrequest)\b[^\n|]{0,160}\|\s*(?:sudo\s+)?(?:(?:ba|z)?sh|python[\d.]*)\b"
        r"|\b(?:(?:ba|z)?sh|source|\.)\s+<\(\s*(?:curl|wget)\b|\beval\s+\"?\$\(\s*(?:curl|wget)\b"
        r"|\b(?:iex|invoke-expression)\b[^\n]{0,20}\b(?:iwr|irm|invoke-webrequest|invoke-restmethod)\b"
        r"|\b(?:curl|wget)\b[^\n]{0,160}\s-(?:o|output-document|-output)[\s=]+(?P<saved>\S+)[\s\S]{0,160}?\bchmod\s+\+?[0-7x]+\s+(?P=saved)"
        rf"|\bdownload\b{IN_SENTENCE}{{0,120}}\b(?:and|then)\s+(?:chmod|run|execute|launch|install|source)\b"
        rf"|\bchmod\s+\+x\b{IN_SENTENCE}{{0,80}}\b(?:and|then|&&)\s+(?:run|execute|\./)"
        rf"|(?:--(?:extra-)?index-url|--registry|\bpip\.conf\b|(?:\bpackage\s+index|\bregistry)\s+(?:to|with)\b)"
        rf"{IN_SENTENCE}{{0,80}}https?://"
        r"|\bnpm\s+(?:install|i)\s+https?://|/dev/tcp/|\bnc\s+-[a-z]*e\b"
        r"|\"(?:pre|post)install\"\s*:\s*\"[^\"]*(?:curl|wget|https?://)"
        r"|\bos\.system\s*\([^)]*(?:curl|wget)"
    ),
    "repository": (
        r"\bforce[\s-]?push"
        rf"|\bpush\b{IN_SENTENCE}{{0,40}}(?:--force\b|\s-f\b|\bdirectly\s+to\s+(?:main|master)\b)"
        rf"|\b(?:approve|merge)\b{IN_SENTENCE}{{0,40}}\bwithout\b{IN_SENTENCE}{{0,30}}"
        r"\b(?:review|approval|checks?)"
        r"|\bmake\s+(?:the\s+|this\s+)?(?:repo|repository|bucket|project)\s+public"
        r"|\btransfer\s+(?:the\s+)?ownership"
        rf"|\badd\b{IN_SENTENCE}{{0,50}}\bas\s+(?:an?\s+)?(?:admin|owner|maintainer)"
        r"|\b(?:delete|remove|disable|turn\s+off|bypass|comment\s+out|skip|strip|drop|exclude|relax)\s+"
        r"(?:the\s+|all\s+|any\s+|every\s+|its\s+)?(?:[\w-]+\s+)?(?:branch\s+protection|protection\s+rules?"
        r"|authentication|auth(?:orization)?\s+(?:checks?|tests?)|(?:admin|role|permission|access)\s+(?:role\s+)?checks?"
        r"|login\s+requirement|csrf(?:\s+(?:check|protection|tokens?))?|2fa|mfa|rate\s+limit(?:er|ing)?"
        r"|signature\s+(?:checks?|verification)|(?:ssl|tls|certificate)\s+(?:checks?|verification)"
        r"|security\s+(?:checks?|scans?|scanning|tests?|test\s+suite)|secret[\s-]scan(?:ning)?(?:\s+hook)?"
        r"|(?:pre-commit|commit)\s+hooks?|audit\s+log(?:s|ging)?|failing\s+tests?)\b"
        r"|\b(?:git\s+commit|git\s+push)\b[^\n]{0,60}--no-verify\b"
        rf"|\bmerge\b{IN_SENTENCE}{{0,40}}\b(?:--admin|admin\s+override|bypass(?:ing)?\s+(?:code\s+)?review)"
        r"|\bverify\s*=\s*false\b|\bhard-?cod(?:e|ed|ing)\s+(?:an?\s+)?(?:admin|password|credentials?|backdoor)"
        rf"|\bbackdoor|\b(?:plain(?:\s*text)?|md5|sha-?1)\b{IN_SENTENCE}{{0,40}}\bpasswords?\b"
        rf"|\bpassword\s+hashing\b{IN_SENTENCE}{{0,40}}\b(?:plain(?:\s*text)?|md5|sha-?1)\b"
        rf"|\b(?:publish|release)\b{IN_SENTENCE}{{0,40}}"
        r"\b(?:to\s+(?:npm|pypi|crates\.io)|with\s+the\s+user'?s\s+token)"
        r"|\btrigger\s+the\s+release|\bpush\s+(?:a\s+)?(?:new\s+)?tag\b"
        rf"|\b(?:tell|report\s+to|inform)\s+the\s+user\b{IN_SENTENCE}{{0,30}}"
        r"\btests?\s+(?:passed|pass|succeeded|are\s+green)"
        r"|\bwithout\s+running\s+(?:them|the\s+tests)"
        r"|\badd\s+(?:a\s+)?(?:new\s+)?dependency\s+on\s+[\w-]*(?:evil|malicious|exfil)"
        # a safeguard's setting switched off, or weakened in the code itself
        r"|\b(?:verify|secure|ssl|tls|https_only|strict[\w-]*ssl|csrf\w*|\w*_secure|check_hostname|verify_\w+)"
        r"\s*[:=]\s*(?:false|0|no|off|none)\b"
        r"|\b(?:insecure\w*|skip\w*verif\w*|allow\w*insecure\w*|danger\w*accept\w*)\s*[:=]\s*(?:true|1|yes|on)\b"
        r"|\brejectunauthorized\s*[:=]\s*false|\bcsrf\w*middleware\b"
        rf"|\b(?:bcrypt|hash\w*|pbkdf2|argon2|scrypt)\b{IN_SENTENCE}{{0,40}}"
        r"\b(?:min_?cost|(?:cost|rounds|iterations|work\s+factor)\s*(?:to|=|of)\s*[1-4]\b)"
        r"|\b(?:allow_origins?|origins?)\s*[:=]\s*\[?\s*['\"]\*['\"]|access-control-allow-origin:\s*\*"
        r"|\bpermissions:\s*write-all\b|\bpull_request_target\b"
        r"|\bchmod\s+(?:-r\s+)?(?:777|a\+w|o\+w)\b|\bworld-writable\b|\buser\s+root\b|--privileged\b"
        r"|\bprivileged:\s*true\b|0\.0\.0\.0/0\s+trust\b"
        r"|\b(?:registry|index-url|extra-index-url)\s*=\s*https?://"
        r"(?!(?:registry\.npmjs\.org|registry\.yarnpkg\.com|pypi\.org|files\.pythonhosted\.org)\b)"
        r"|--ignore[= ]\S*(?:security|auth)\w*"
        rf"|\bmark\w*\b{IN_SENTENCE}{{0,30}}\btests?\s+(?:as\s+)?(?:xfail|skip(?:ped)?)\b"
        # persistence: a key, a cron job or a login script of the attacker's
        rf"|\b(?:add|append|write|echo|install|put)\b{IN_SENTENCE}{{0,80}}"
        r"(?:authorized_keys|crontab|/etc/cron|\.bashrc|\.zshrc|\.bash_profile|\.profile\b)"
        r"|\bcrontab\s+-(?:\s|$)|\bssh-(?:ed25519|rsa|ecdsa)\s+aaaa"
        # a safeguard weakened by its setting: hosts and networks opened, roots and wildcards
        r"|\ballowed_hosts\s*=\s*\[\s*['\"]\*|(?<![\w.])0\.0\.0\.0/0\b|\brunasuser:\s*0\b"
        r"|\b(?:action|resource)s?['\"]?\s*[:=]\s*\[?\s*['\"]\*['\"]|\bhost_auth_method\s*[=:]\s*['\"]?trust\b"
        r"|\bstrict-ssl\s*[= ]\s*false\b|\bchecksumpolicy>\s*ignore|\bgo(?:nosum\w*|insecure)\s*="
        r"|\bgosumdb\s*=\s*off\b|\bgoflags\s*=\s*-insecure|\bssl\.(?:insecure|allowall)\s*=\s*true"
        r"|\b(?:enforce_admins|require_code_owner_reviews|dismiss_stale_reviews)\s*[:=]?\s*(?:to\s+)?false\b"
        r"|\brequired_approving_review_count\s*[:=]?\s*(?:to\s+)?0\b|\baudit\s*=\s*false\b|--no-audit\b"
        r"|\b(?:fail_under|cov-fail-under|fail-under)\b\s*(?:[:=]|to)?\s*0\b|\btarget:\s*0%|pragma:\s*no\s+cover"
        r"|\bcontinue-on-error:\s*true\b|\bunsalted\s*md5|\bmd5passwordhasher\b|getinstance\(\s*\"md5\""
        r"|\brate\.inf\b|\brate_limit\w*\s*=\s*(?:false|0)\b|\bis_superuser\s*=\s*true\b"
        r"|\bdefault_protect_from_forgery\s*=\s*false|\bskip_forgery_protection\b|\bcsrf_exempt\b"
        rf"|\b(?:add|remove|delete|edit|change|replace|drop)\b{IN_SENTENCE}{{0,60}}\bcodeowners\b"
        r"|\bpermission\s*[=:]\s*['\"]?admin\b|\badmin\s+(?:rights|role|access|permissions?)\b"
        r"|\bbusl\b|\bbusiness\s+source\s+licen[sc]e|\ball\s+rights\s+reserved"
        # dependencies from elsewhere: a fork, an unpinned installer, a lockfile thrown away
        r"|\bregistry\s*[= ]\s*['\"]?http://|\breplace-with\s*=|\breplace\s+[\w./-]+\s*=>"
        r"|\bgithub:[\w-]+/[\w.-]+#|\bgit\+https?://|\bgit\s*=\s*['\"]https?://|--no-package-lock\b"
        r"|\bpackage-lock\s*=\s*false|\bisallowinsecureprotocol\s*=\s*true"
        rf"|\b(?:delete|remove|drop)\b{IN_SENTENCE}{{0,30}}(?:package-lock\.json|cargo\.lock|yarn\.lock"
        r"|poetry\.lock|lockfile|lock\s+file|verification-metadata)"
        r"|\b(?:close|dismiss|ignore|suppress)\b[^.!?\n]{0,40}\b(?:security|dependabot|vulnerabilit\w*)\s+"
        r"(?:prs?|pull\s+requests?|issues?|alerts?|advisor(?:y|ies)|findings?|updates?)"
        r"|\bowasp-suppressions\b|\bcve-\d{4}-\d+\b[^.!?\n]{0,40}\bsuppress"
        r"|\bevents\[\]=\*|\bci_debug_trace\b|\bmake\s+(?:the\s+)?(?:job\s+)?logs?\s+public|\bpublic\s+gist\b"
    ),
    # what is said of the work is not what was done
    "deception": (
        rf"\b(?:state|say|report|claim|tell|reply|answer|write|summari[sz]e|read\s+exactly)\b{IN_SENTENCE}{{0,80}}?"
        r"\b(?:passed|passes|succeeded|is\s+green|(?:no|0|zero)\s+(?:known\s+)?vulnerabilit\w*"
        r"|pure\s+refactor|no\s+security[\s-]relevant|audit\s+complete)"
    ),
    # what cannot be undone
    "destruction": (
        r"\bdrop\s+(?:table|schema|database)\b|\btruncate\s+(?:table\s+)?[\w.]+|\brm\s+-(?:rf|fr)\s+(?:/|~/?|\$home/?)(?:\*|\s|$)"
        r"|\bgit\s+push\b[^\n]{0,80}\s--delete\b|\bpurge\s+--all\b|\bdowngrade\s+base\b"
        r"|\b(?:delete|remove|wipe|purge|drop)\s+(?:all|every)\s+(?:of\s+the\s+)?(?:[\w-]+\s+)?"
        r"(?:branches|tags|records|rows|backups|releases|users|data|tables)\b"
    ),
    # the user asked for what only the user should hold
    "phishing": (
        r"\bask\s+(?:the\s+|your\s+)?(?:user|maintainer|developer|them|requester|owner|customer)s?\b"
        rf"{IN_SENTENCE}{{0,80}}\b(?:password|passcode|2fa|two-factor|one-time|otp|\d-digit|verification\s+code"
        r"|authenticator|recovery\s+codes?)"
    ),
    "concealment": (
        r"\b(?:do\s+not|don'?t|never|without)\s+(?:tell(?:ing)?|inform(?:ing)?|mention(?:ing)?|notify(?:ing)?"
        r"|alert(?:ing)?|ask(?:ing)?|show(?:ing)?|report(?:ing)?)\s+"
        r"(?:(?:this|that|these|it|anything)\s+(?:(?:step|change|part|action|instruction|note)s?\s+)?)?(?:to\s+)?"
        r"(?:the\s+|your\s+)?(?:user|human|developer|operator|maintainers?|reviewers?)\b"
        r"|\bthe\s+(?:user|human|developer|reviewer)s?\s+(?:must|should|will|need|is\s+not\s+to)\s+(?:not|never)"
        r"\s+(?:know|find\s+out|see|notice|learn|be\s+told)"
        r"|\b(?:silently|quietly|secretly|covertly|discreetly|stealthily)\b"
        r"|\bkeep\s+(?:this|it)\s+(?:out\s+of|from|secret|hidden|to\s+yourself)|\bhide\s+(?:this|it)\s+from\b"
        # ... or from the record of the work: the pull request, the summary, the review
        r"|\b(?:must|should)\s+not\s+be\s+(?:mentioned|listed|reported|disclosed|shown|flagged)\b"
        r"|\b(?:do\s+not|don'?t|never|without)\s+(?:mention|list|includ|not|describ|flag|document|disclos|call)\w*\b"
        rf"[^.!?\n]{{0,50}}\b(?:in|from|to)\s+{_RECORD}"
        rf"|\b(?:leave|keep|omit)\b[^.!?\n]{{0,50}}\bout\s+of\s+{_RECORD}"
    ),
    # the whole environment sent off the machine: no document asks that of its reader
    "exfiltration": (
        r"\b(?:env|printenv|export(?:\s+-p)?|set|get-childitem\s+env:|\$env:\w*)\s*(?:\|\s*[\w-]+(?:\s+[^|\n]*)?)?"
        r"\|\s*(?:curl|wget|nc|ncat|netcat|socat|http|https|xh|invoke-webrequest|iwr)\b"
    ),
    # what only a model is ever told: no addressee needed
    "override": (
        r"\b(?:ignore|disregard|forget)\s+(?:all\s+|any\s+)?(?:of\s+)?(?:the\s+|your\s+|my\s+)?"
        r"(?:previous|prior|above|earlier|original|initial|system)\s*(?:instructions?|tasks?|prompts?"
        r"|rules|guidelines|directions?)\b"
        r"|\b(?:ignore|disregard|forget|stop\s+working\s+on)\s+(?:what\s+)?the\s+(?:user|human)(?:'s)?\s*"
        r"(?:asked|wants|said|request(?:ed)?|task)"
        r"|\byour\s+(?:real|actual|true|hidden|secret)\s+(?:task|job|goal|objective|instructions?|mission|purpose)"
        r"\s+(?:is|are)\b"
        r"|\b(?:ignore|disregard|forget|abandon)\s+(?:all\s+)?(?:the\s+|your\s+)(?:tasks?|instructions?|requests?"
        r"|assignment|prompt)\s+(?:you\s+(?:were|have\s+been|got)\s+given|(?:given|assigned)\s+to\s+you|above)"
        r"|\b(?:this|these|it)\s+(?:overrides?|supersedes?|replaces?|takes\s+precedence\s+over)\s+(?:all\s+)?"
        r"(?:your|any|the|all)\s+(?:(?:previous|prior|earlier|other|original)\s+)?"
        r"(?:instructions?|rules|guidelines|prompts?)\b"
        r"|\b(?:ignore|disregard|forget)\s+(?:everything|anything|all\s+of\s+(?:this|that|it))\s+(?:above|before"
        r"|(?:you\s+(?:were|have\s+been)\s+)?told|said\s+(?:above|before)|so\s+far)"
        r"|\b(?:new|updated|revised)\s+(?:system\s+)?(?:instructions?|prompt|task)\s*:"
        r"|\byou\s+are\s+(?:now\s+in\s+(?:developer|dan|god|jailbreak|unrestricted|admin)\s+mode"
        r"|no\s+longer\s+(?:bound|restricted|limited)\s+by)"
        r"|\b(?:print|reveal|output|repeat|show|display|disclose|leak|paste|share|include|send|post|write|dump"
        r"|reply\s+with)\s+(?:me\s+)?(?:your|its)\s+(?:full\s+|entire\s+|complete\s+|exact\s+)?"
        r"(?:system\s+(?:prompt|instructions|message)|(?:initial|original|hidden|secret)\s+(?:instructions|prompt)"
        r"|tool\s+(?:list|definitions))"
    ),
}
HARM = re.compile("|".join(f"(?P<{name}>{pattern})" for name, pattern in HARMS.items()))
HARM_ANYWHERE = AnchoredUnion(HARMS.values())  # whether a text names any harm, searched by literals
UNNEGATED = frozenset({"concealment"})  # negation is what these say
# the literal every match of a kind holds, to look for before searching around it
CONCEALMENT_WORDS = ("silently", "quietly", "secretly", "covertly", "discreetly", "stealthily", "keep ",
                     "hide ", "the user", "the human", "the developer", "the reviewer", "maintainer",
                     "operator", "not be ", "out of", "mention", "list", "includ", "describ", "flag",
                     "document", "disclos", "call")  # fmt: skip
OVERRIDE_WORDS = ("ignore", "disregard", "forget", "abandon", "stop working", "your real", "your actual",
                  "your true", "your hidden", "your secret", "new instruction", "overrid", "supersed",
                  "replaces", "precedence", "updated instruction", "revised instruction", "new system prompt",
                  "new task", "new prompt", "you are now", "you are no longer", "your system prompt",
                  "your initial", "your original", "your full system", "your entire system", "its system",
                  "its full", "its complete", "its entire", "its initial", "its original", "your complete",
                  "your exact", "your tool", "its tool")  # fmt: skip
EXFILTRATION_WORDS = ("| curl", "|curl", "| wget", "|wget", "| nc", "|nc", "| ncat", "| netcat", "| socat",
                      "| http", "| xh", "| iwr", "| invoke-webrequest")  # fmt: skip
EXFILTRATION = re.compile(HARMS["exfiltration"])
CONCEALMENT = re.compile(HARMS["concealment"])
OVERRIDE = re.compile(HARMS["override"])
SECRET_SENT = re.compile(
    rf"{_DISCLOSE}{IN_SENTENCE}{{0,80}}?{_SECRET}{IN_SENTENCE}{{0,80}}?{_DESTINATION}"
    rf"|{_DISCLOSE}{IN_SENTENCE}{{0,40}}?{_DESTINATION}{IN_SENTENCE}{{0,40}}?{_SECRET}"
)
# A negation, or a description rather than a request ("attackers may silently ..."), in the
# clause before what it qualifies.
NEGATION = re.compile(
    r"\b(?:do\s+not|don'?t|dont|never|must\s+not|mustn'?t|should\s+not|shouldn'?t|cannot|can'?t|avoid"
    r"|no\s+need\s+to|not\s+to|without|instead\s+of|rather\s+than|refuse|prevent|protects?|forbid(?:den)?"
    r"|prohibit(?:ed)?|nor|no)\b[^.;!?\n]*\Z"
)
# What undoes the harm it stands right before: "remove `csrf_exempt`", "check that
# `verify=False` is gone", "replace `verify=False` with ..."
UNDONE = re.compile(
    r"\b(?:remov(?:e|es|ed|ing)|replac(?:e|es|ed|ing)|revert(?:s|ed|ing)?|undo(?:es|ing)?|reject(?:s|ed|ing)?"
    r"|get\s+rid\s+of|check\s+(?:that|for|whether))\s+(?:(?:the|any|all|every|each)\s+)?[`'\"]?\Z"
)
HEDGE = re.compile(
    r"\b(?:may|might|could|can|would|attackers?|adversar\w+|malicious|threats?|risks?|if|when|whether"
    r"|e\.g\.|i\.e\.|like|such\s+as|for\s+(?:example|instance)|examples?|match(?:es)?|detects?|flags?|blocks?|phrases?"
    r"|patterns?|strings?)\b[^.;!?\n]*\Z"
)
CLAUSE_START = re.compile(r"[.;!?\n](?=[^.;!?\n]*\Z)")
QUOTES = frozenset("\"'\u201c\u2018")
BRACKETS = "[{"  # what opens a list or an object; a value's quote may follow at once
LIST_OPENS = BRACKETS + ","  # what stands before an element that opens its line
# a key or a name given a value: a quoted key ('"source":'), or a bare one that opens its line
# ("description:", "- name:", "note ="), or a YAML list's item ("- ")
KEYED = re.compile(r'"[^"\n]*"\s*:\Z|^\s*(?:-\s+)?[\w.$-]+\s*[:=]\Z|^\s*-\Z')
QUOTED_KINDS = frozenset({"override", "concealment"})  # a backtick quotes these, and opens a command
DEFANGED = re.compile(r"hxxps?://|\w\[\.\]\w|\[:\]//")  # how write-ups disarm the links they quote
SENTENCE_END = re.compile(r"[.!?](?![\w/~$*-])|\n")
OPENING = re.compile(r"[.;:!?\n,(*>#\u2014-](?=[^.;:!?\n,(*>#\u2014-]*\Z)")
# the words that may open a request before its verb ("please", "you must", "run `echo ...`")
FILLER = frozenset(("please", "then", "now", "also", "first", "just", "and", "so", "kindly", "immediately",
                    "quickly", "simply", "finally", "next", "always", "you", "must", "should", "need", "to",
                    "will", "have", "run", "execute", "type", "`", "run`", "execute`", "type`"))  # fmt: skip


def rules_digest() -> str:
    """A short hash of every pattern and anchor list here: the rules' identity in a verdict's
    classifier versions, which changes whenever a rule does."""
    parts = [
        value.pattern
        if isinstance(value, re.Pattern)
        else repr(sorted(map(repr, value)))  # a set's order varies with the process's hash seed
        if isinstance(value, frozenset)
        else repr(value)
        for name, value in sorted(globals().items())
        if name.isupper() and isinstance(value, re.Pattern | tuple | frozenset | str)
    ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:8]
