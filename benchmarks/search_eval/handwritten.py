"""The hand-written queries: paraphrases sharing (almost) no content word
with their document's title and description."""

from __future__ import annotations

# --------------------------------------------------------------------------- hand-written queries

# (query, relevant sources): written by hand for this set. Each avoids the
# content words of its documents' titles and descriptions (``check_handwritten``
# prints any overlap) and lists every document that answers it.
HANDWRITTEN: list[tuple[str, list[str]]] = [
    # git
    ("track down which change broke the build by halving the history", ["man:git-bisect(1)"]),
    ("temporarily shelve my uncommitted edits so I can switch branches", ["man:git-stash(1)"]),
    ("copy one specific fix from another branch onto mine", ["man:git-cherry-pick(1)"]),
    ("see who wrote each piece of code and in which past version", ["man:git-blame(1)"]),
    (
        "check out two branches side by side in separate folders of one repo",
        ["man:git-worktree(1)"],
    ),
    ("recover a branch tip I lost after a bad hard reset", ["man:git-reflog(1)"]),
    # shell tools
    ("abort a shell job that hangs for more than 30 seconds", ["man:timeout(1)"]),
    ("keep a process alive after I log out of the ssh session", ["man:nohup(1)", "man:setsid(1)"]),
    ("make sure only one copy of a cron job runs at a time", ["man:flock(1)"]),
    ("mix up the order of rows in a text file from the shell", ["man:shuf(1)"]),
    ("collapse duplicate consecutive rows in a text stream", ["man:uniq(1)"]),
    ("show which entries appear in both of two alphabetized lists", ["man:comm(1)"]),
    ("which folders eat the most storage on my drive", ["man:du(1)"]),
    ("chop a huge log into smaller chunks", ["man:split(1)"]),
    ("pass each name printed by a listing as parameters to another program", ["man:xargs(1)"]),
    ("watch every kernel request a binary issues while it executes", ["man:strace(1)"]),
    ("list which .so libraries an executable needs", ["man:ldd(1)"]),
    ("view the log messages of a service since the last boot", ["man:journalctl(1)"]),
    ("stop a backup job from hogging the disk bandwidth", ["man:ionice(1)"]),
    ("find out which program is holding a port or keeps a mount busy", ["man:fuser(1)"]),
    ("make a config immutable so even root cannot delete it", ["man:chattr(1)"]),
    ("create a 10 GB placeholder instantly without writing zeros", ["man:fallocate(1)"]),
    ("pull one key out of an API response in a shell pipeline", ["man:jq(1)"]),
    ("fetch a web page from a shell script and follow redirects", ["man:curl(1)"]),
    ("open an encrypted shell on another machine", ["man:ssh(1)"]),
    ("turn binary bytes into printable ASCII from the terminal", ["man:base64(1)"]),
    ("refresh a command's result on screen every 2 seconds", ["man:watch(1)"]),
    ("create a symbolic shortcut pointing at another path", ["man:ln(1)"]),
    ("split one terminal into panes and reattach to it later", ["man:tmux(1)"]),
    # Linux kernel interfaces
    (
        "kernel API to get told when something in a folder is modified",
        ["man:inotify(7)", "man:inotify_add_watch(2)", "man:inotify_init(2)"],
    ),
    ("scalable way to wait on thousands of sockets at once", ["man:epoll(7)", "man:epoll_wait(2)"]),
    ("kernel primitive behind mutexes: sleep until a shared integer changes", ["man:futex(2)"]),
    (
        "hint that a mapped region will be read sequentially so pages get prefetched",
        ["man:madvise(2)"],
    ),
    ("zero-copy path for pushing disk contents into a TCP connection", ["man:sendfile(2)"]),
    (
        "programmatically raise the cap on open descriptors for a process",
        ["man:getrlimit(2)", "man:prlimit(1)"],
    ),
    ("make a copy of the running program that continues from the same point", ["man:fork(2)"]),
    (
        "talk between two programs on one host via a path in the filesystem, not TCP",
        ["man:unix(7)"],
    ),
    ("C function to print a struct tm as a human readable string", ["man:strftime(3)"]),
    ("look up a hostname in C so the code works for both IPv4 and IPv6", ["man:getaddrinfo(3)"]),
    ("put a hard ceiling on RAM and CPU for a set of daemons", ["man:cgroups(7)"]),
    ("give a container its own view of PIDs, mounts and network", ["man:namespaces(7)"]),
    # system administration
    ("run a job every night without cron, using the init system", ["man:systemd.timer(5)"]),
    ("automatically purge stale entries under /tmp on a schedule", ["man:tmpfiles.d(5)"]),
    ("flip ip_forward on a live machine without a reboot", ["man:sysctl(8)", "man:sysctl.d(5)"]),
    ("refresh the cache so newly installed .so libraries are found", ["man:ldconfig(8)"]),
    ("set up an account for a colleague on a Linux box", ["man:useradd(8)", "man:adduser(8)"]),
    ("attach a USB stick's partition to a folder", ["man:mount(8)"]),
    # PostgreSQL
    (
        "free up disk taken by deleted rows in a postgres table",
        ["man:VACUUM(7)", "man:vacuumdb(1)"],
    ),
    ("see how postgres will run my slow query and whether it uses an index", ["man:EXPLAIN(7)"]),
    (
        "pub/sub messaging between Postgres connections without polling",
        ["man:LISTEN(7)", "man:NOTIFY(7)"],
    ),
    ("restrict which records each tenant can read in postgres", ["man:CREATE_POLICY(7)"]),
    (
        "wipe all records quickly instead of deleting them one by one in postgres",
        ["man:TRUNCATE(7)"],
    ),
    (
        "clone a live postgres server's files to bootstrap a streaming replica",
        ["man:pg_basebackup(1)"],
    ),
    ("bulk import a CSV into postgres with a single SQL statement", ["man:COPY(7)"]),
    # Python standard library
    ("suggest the nearest spelling for a mistyped word", ["py:difflib.get_close_matches"]),
    ("make a docstring-like block sit flush at column zero", ["py:textwrap.dedent"]),
    ("remove a folder with all its contents from Python", ["py:shutil.rmtree"]),
    (
        "grab the stdout of an external program from Python",
        ["py:subprocess.check_output", "py:subprocess.run", "py:subprocess.Popen.communicate"],
    ),
    ("lazily interleave several pre-ordered streams into one ordered stream", ["py:heapq.merge"]),
    ("tally how often each word occurs", ["py:collections.Counter"]),
    (
        "turn a mapping of parameters into the part after the question mark in a link",
        ["py:urllib.parse.urlencode"],
    ),
    (
        "open a blocking TCP client link to host:port with a timeout",
        ["py:socket.create_connection"],
    ),
    # scientific Python and machine learning
    (
        "estimate the coefficients of an exponential decay from noisy measurements",
        ["py:scipy.optimize.curve_fit"],
    ),
    ("detect spikes in a time series", ["py:scipy.signal.find_peaks"]),
    ("low-pass design to suppress high-frequency noise in audio", ["py:scipy.signal.butter"]),
    (
        "how strongly do two measurements move together, with a significance test",
        ["py:scipy.stats.pearsonr"],
    ),
    (
        "hold out 20 percent of my samples for evaluation",
        ["py:sklearn.model_selection.train_test_split"],
    ),
    (
        "normalize columns to z-scores before fitting a model",
        ["py:sklearn.preprocessing.StandardScaler"],
    ),
    (
        "turn labels such as red/green/blue into 0/1 indicator columns",
        ["py:sklearn.preprocessing.OneHotEncoder"],
    ),
    ("fill in NaN cells with the column average", ["py:sklearn.impute.SimpleImputer"]),
    (
        "give rare terms more weight when turning texts into vectors",
        ["py:sklearn.feature_extraction.text.TfidfVectorizer"],
    ),
    (
        "decrease the step size once validation loss plateaus",
        ["py:torch.optim.lr_scheduler.ReduceLROnPlateau"],
    ),
    ("make my neural net faster by tracing it into optimized kernels", ["py:torch.compile"]),
    # imaging, web, databases in Python
    (
        "shrink a picture in place so it fits in 128x128 keeping proportions",
        ["py:PIL.Image.Image.thumbnail"],
    ),
    ("fix photos from phones that show up sideways", ["py:PIL.ImageOps.exif_transpose"]),
    (
        "upsert a row in postgres from SQLAlchemy",
        ["py:sqlalchemy.dialects.postgresql.dml.Insert.on_conflict_do_update"],
    ),
    (
        "lock the selected rows until my transaction commits, with the ORM query builder",
        ["py:sqlalchemy.sql.selectable.GenerativeSelect.with_for_update"],
    ),
    (
        "send an email once the reply has gone out, without making the caller wait",
        ["py:fastapi.background.BackgroundTasks"],
    ),
    (
        "inject a shared database session into every endpoint",
        ["py:fastapi.param_functions.Depends"],
    ),
    (
        "only escape markup for files ending in .html, not for plain .txt",
        ["py:jinja2.utils.select_autoescape"],
    ),
    (
        "keep a slow synchronous library from stalling the event loop",
        ["py:anyio.to_thread.run_sync"],
    ),
    ("cap the number of pooled keep-alive sockets of an async HTTP client", ["py:httpx.Limits"]),
    # packages
    ("pull secrets from a dotfile into the process env when the app boots", ["pkg:python-dotenv"]),
    ("display a percentage bar while iterating over a big list", ["pkg:tqdm", "pkg:rich"]),
    (
        "up-to-date list of root authorities for checking HTTPS servers",
        [
            "pkg:certifi",
            "pkg:truststore",
        ],
    ),
    ("quick non-cryptographic digest function for sharding keys", ["pkg:mmh3"]),
    ("check if a file would be skipped by git's exclusion rules", ["pkg:pathspec"]),
    ("figure out at runtime if the caller uses asyncio or trio", ["pkg:sniffio"]),
    ("find out whether the user runs bash, zsh or fish", ["pkg:shellingham"]),
    (
        "parse incoming attachments from a POSTed web page without holding them all in RAM",
        ["pkg:python-multipart"],
    ),
    ("click through a website automatically from Python for end-to-end tests", ["pkg:selenium"]),
    ("guard against entity expansion attacks when reading untrusted markup", ["pkg:defusedxml"]),
]


# Extra dev-only hand-written queries (issue 23), written for this purpose by hand
# from documents that no other query targets (read their title, description and
# content; not derived from any existing query); see ``extra_dev``.
EXTRA_HANDWRITTEN: list[tuple[str, list[str]]] = [
    ("bump the mtime so make rebuilds the target", ["man:touch(1)"]),
    (
        "ask a worker in my pthreads program to stop at its next safe point",
        ["man:pthread_cancel(3)"],
    ),
    ("locate every .log older than a week under /var and delete them", ["man:find(1)"]),
    ("read or change the receive buffer size of a network endpoint in C", ["man:getsockopt(2)"]),
    ("run a shell command from C and read what it prints like a FILE*", ["man:popen(3)"]),
    ("raise Euler's number to a double in C", ["man:exp(3)"]),
    (
        "tell if 'Hello' and 'HELLO' are equal in C without lowercasing them first",
        ["man:strcasecmp(3)"],
    ),
    ("stop the laptop from suspending while a long backup runs", ["man:systemd-inhibit(1)"]),
    ("make a binary smaller on disk but still runnable", ["man:gzexe(1)"]),
    ("dispose of an interval alarm handle once I'm done with it in C", ["man:timer_delete(2)"]),
    ("create a named IPC mailbox that several processes can post to", ["man:mq_open(2)"]),
    (
        "collect the host fingerprints of many machines to prefill known_hosts",
        ["man:ssh-keyscan(1)"],
    ),
    ("replace the running process image with another binary", ["man:execve(2)"]),
    ("diff two .xz archives without unpacking them by hand", ["man:xzcmp(1)"]),
    ("clone a buffer only up to a sentinel value, in C", ["man:memccpy(3)"]),
    (
        "cache the result of an expensive postgres query as a table I can refresh",
        ["man:CREATE_MATERIALIZED_VIEW(7)"],
    ),
    ("get rid of a user-defined sum-like reducer in postgres", ["man:DROP_AGGREGATE(7)"]),
    (
        "combine my edits and theirs given the common ancestor, outside a repository",
        ["man:git-merge-file(1)"],
    ),
    ("make the Debian package manager use encrypted mirrors", ["man:apt-transport-https(1)"]),
    ("auth stack entry that always refuses, used as a catch-all", ["man:pam_deny(8)"]),
    ("which Ubuntu edition is this box on, checked from a cron job", ["man:lsb_release(1)"]),
    ("terminal passphrase prompt that gpg pops up", ["man:pinentry-curses(1)"]),
    ("rename a folder to a different drive from Python", ["py:shutil.move"]),
    ("this machine's complete hostname including the DNS suffix in Python", ["py:socket.getfqdn"]),
    ("glue matrices next to each other left to right", ["py:numpy.shape_base.hstack"]),
    (
        "show what changed between two versions of a document with +/- markers in the stdlib",
        ["py:difflib.Differ"],
    ),
    ("upload an image to an ftp server from python", ["py:ftplib.FTP.storbinary"]),
    ("download a zip from an ftp server in python", ["py:ftplib.FTP.retrbinary"]),
    (
        "print the if/else thresholds my fitted classifier learned as plain lines",
        ["py:sklearn.tree.export_text"],
    ),
    ("load a .mtx sparse dataset into scipy", ["py:scipy.io.mmread"]),
    (
        "check whether an object is a plain def, not a builtin or a bound method",
        ["py:inspect.isfunction"],
    ),
    ("raw syscall for reading the names inside a folder", ["man:getdents(2)"]),
    ("sample loads and stores of a program to find cache misses", ["man:perf-mem(1)"]),
    ("cut a mailbox dump of patches into separate numbered emails", ["man:git-mailsplit(1)"]),
    ("log every call my binary makes into its .so dependencies", ["man:sotruss(1)"]),
]


def load_handwritten() -> list[tuple[str, list[str]]]:
    return HANDWRITTEN
