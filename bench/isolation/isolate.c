/*
 * isolate: the isolation floor of `make bench`.
 *
 * It runs a function the way ocifn's containers run it, with the same
 * namespaces, ID mappings, mounts, masked paths, hostname, rlimits,
 * capabilities (none), no_new_privs and seccomp filter, but with nothing of
 * a container runtime: no config to parse, no state files, no second
 * process, no start signal. One clone into new user and PID namespaces, the
 * other namespaces unshared once the IDs are mapped (as ocifn's crun does),
 * the mounts on mount points resolved inside the image (openat2 with
 * RESOLVE_IN_ROOT, as crun guards against an image's symlinks), pivot_root,
 * exec. Whatever a call costs here is the kernel's work for that isolation,
 * which any runtime pays; what ocifn's containers cost beyond it is crun's
 * and ocifn's own. It creates no missing mount point and knows only what
 * ocifn's configs use: the bench derives every argument from the
 * config.json of the bundle `ocifn serve` made, and refuses a config with
 * anything else (bench/isolation.go), so the two run the same isolation.
 *
 * It runs a closed loop of calls itself, from -c concurrent workers, for -t
 * seconds or -n calls, and prints a line of counts (answered calls, errors,
 * and the time it ran in nanoseconds), then the latency of each answered
 * call in nanoseconds, one per line. The bench reads the CPU it used (its
 * reaped children's) and the machine's. With -p, each worker makes RATE
 * calls a second on a fixed schedule, as ghz --rps does: a call that
 * overruns its slot makes the next ones come sooner, not later.
 *
 * With -W N, each worker keeps N containers made ahead, as ocifn's warm
 * pool does: set up to the last step before the function's exec, seccomp
 * filter attached, waiting on a pipe for the start. A call then takes the
 * oldest, starts it and writes the request, reads the answer, and reaps the
 * process; the worker makes the next container after the answer, while the
 * ones made before finish their set-up in their own processes. Like ocifn,
 * the worker holds each container's mount, network and IPC namespaces,
 * opened once the container is ready (after each answer, for every
 * container that is by then), and lets go of them after the answer, so
 * that their teardown does not follow the function's exit on the call's
 * path. A worker starts calling once its first containers are all ready.
 * A call's time runs from the start to the reaped exit, and includes any
 * wait for a container still setting up (in a closed loop, one made after
 * the last answer has only a call's time to finish): what starting a
 * container made ahead costs the kernel, with nothing of a runtime. The
 * CPU the loop reports includes the set-up of the containers still made
 * ahead when it ends, which no call used.
 *
 * Usage: isolate -r ROOTFS -i REQUEST [-c N] [-t SECONDS] [-n CALLS]
 *        [-p RATE] [-W N] [-u CONTAINER:HOST:SIZE] [-g CONTAINER:HOST:SIZE]
 *        [-m TYPE:SOURCE:DEST:FLAGS:DATA]... [-M MASKED]... [-R]
 *        [-h HOSTNAME] [-l RESOURCE:SOFT:HARD]... [-s BPF] [-w CWD]
 *        [-e NAME=VALUE]... [-o OUTPUT] -- PROGRAM ARG...
 * -o keeps what the last call wrote on stdout in the file OUTPUT.
 * Root only: it writes the ID mappings of its children.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/openat2.h>
#include <linux/seccomp.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_ITEMS 64
#define MAX_AHEAD 16

struct mnt {
	char *type, *source, *dest, *data;
	unsigned long flags;
};

static struct {
	const char *rootfs, *request, *hostname, *cwd, *bpf_path, *out_path;
	const char *uid_map, *gid_map;
	struct mnt mounts[MAX_ITEMS];
	int n_mounts;
	const char *masked[MAX_ITEMS];
	int n_masked;
	struct {
		int resource;
		struct rlimit limit;
	} rlimits[MAX_ITEMS];
	int n_rlimits;
	char *env[MAX_ITEMS + 1];
	int n_env;
	int readonly_root;
	char **argv;
	char *input;
	size_t input_len;
	struct sock_fprog bpf;
} cfg;

static void die(const char *what)
{
	fprintf(stderr, "isolate: %s: %s\n", what, strerror(errno));
	exit(2);
}

static void usage(const char *why)
{
	fprintf(stderr, "isolate: %s (see the comment at the top of bench/isolation/isolate.c)\n", why);
	exit(2);
}

/* split cuts s at the next ':' and returns what followed it. */
static char *split(char *s)
{
	char *c = strchr(s, ':');
	if (c == NULL)
		usage("a field is missing in a -m, -l, -u or -g argument");
	*c = 0;
	return c + 1;
}

static char *read_file(const char *path, size_t *len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		die(path);
	struct stat st;
	if (fstat(fd, &st) < 0)
		die(path);
	char *b = malloc(st.st_size + 1);
	if (b == NULL)
		die("malloc");
	size_t n = 0;
	while (n < (size_t) st.st_size) {
		ssize_t r = read(fd, b + n, st.st_size - n);
		if (r <= 0)
			die(path);
		n += r;
	}
	close(fd);
	b[n] = 0;
	*len = n;
	return b;
}

static int64_t now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t) t.tv_sec * 1000000000 + t.tv_nsec;
}

static void fail(const char *what)
{
	/* stderr is the parent's: the first failure says what went wrong. */
	fprintf(stderr, "isolate: in the container: %s: %s\n", what, strerror(errno));
	_exit(127);
}

/* root_fd is the rootfs, opened once it is bind mounted on itself. */
static int root_fd = -1;

/* in_root opens path as the image sees it: symlinks in the image resolve
 * inside it (RESOLVE_IN_ROOT), so an image cannot point a mount at the
 * host, as crun guards too. It returns a /proc/self/fd path to mount on,
 * and -1 in *fd if path is not there. */
static char *in_root(const char *path, int *fd)
{
	static char buf[64];
	struct open_how how = { .flags = O_PATH | O_CLOEXEC, .resolve = RESOLVE_IN_ROOT };
	*fd = syscall(SYS_openat2, root_fd, path[0] == '/' ? path + 1 : path, &how, sizeof how);
	snprintf(buf, sizeof buf, "/proc/self/fd/%d", *fd);
	return buf;
}

/* locked_flags are the flags of the mount at path that a bind remount in
 * a user namespace must keep (the kernel refuses to drop them). */
static unsigned long locked_flags(const char *path)
{
	struct statvfs s;
	unsigned long f = 0;
	if (statvfs(path, &s) < 0)
		fail(path);
	if (s.f_flag & ST_NODEV)
		f |= MS_NODEV;
	if (s.f_flag & ST_NOSUID)
		f |= MS_NOSUID;
	if (s.f_flag & ST_NOEXEC)
		f |= MS_NOEXEC;
	if (s.f_flag & ST_RDONLY)
		f |= MS_RDONLY;
	return f;
}

/* remount_bind opens path anew, so as to remount the bind mount just made
 * there and not the one under it, and remounts it with flags (and the
 * flags it must keep), if any. */
static void remount_bind(const char *path, unsigned long flags)
{
	int fd;
	char *p = in_root(path, &fd);
	if (fd < 0 || (flags && mount(NULL, p, NULL, MS_BIND | MS_REMOUNT | flags | locked_flags(p), NULL) < 0))
		fail(path);
	close(fd);
}

static void do_mount(struct mnt *m)
{
	int fd;
	char dest[64];
	snprintf(dest, sizeof dest, "%s", in_root(m->dest, &fd));
	if (fd < 0)
		fail(m->dest);
	if (m->flags & MS_BIND) {
		if (mount(m->source, dest, NULL, m->flags & (MS_BIND | MS_REC), NULL) < 0)
			fail(m->dest);
	} else if (mount(m->source, dest, m->type, m->flags, m->data[0] ? m->data : NULL) < 0) {
		fail(m->dest);
	}
	close(fd);
	if (m->flags & MS_BIND)
		remount_bind(m->dest, m->flags & ~(MS_BIND | MS_REC));
}

static void mask(const char *path)
{
	int fd;
	struct stat st;
	char *p = in_root(path, &fd);
	if (fd < 0 && (errno == ENOENT || errno == EACCES))
		return; /* as crun: a path that is not there needs no mask */
	if (fd < 0)
		fail(path);
	if (fstat(fd, &st) < 0)
		fail(path);
	if (S_ISDIR(st.st_mode)) {
		if (mount("tmpfs", p, "tmpfs", MS_RDONLY, "size=0k") < 0)
			fail(path);
	} else if (mount("/dev/null", p, NULL, MS_BIND, NULL) < 0) {
		fail(path);
	}
	close(fd);
	if (!S_ISDIR(st.st_mode))
		remount_bind(path, MS_RDONLY);
}

static void loopback_up(void)
{
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	struct ifreq r = { .ifr_name = "lo", .ifr_flags = IFF_UP | IFF_RUNNING };
	if (s < 0 || ioctl(s, SIOCSIFFLAGS, &r) < 0)
		fail("bringing up lo");
	close(s);
}

static void drop_capabilities(void)
{
	for (int c = 0; c <= 63; c++)
		if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) < 0 && errno != EINVAL)
			fail("PR_CAPBSET_DROP");
	prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct d[2] = { 0 };
	if (syscall(SYS_capset, &h, d) < 0)
		fail("capset");
}

/* container runs in the child once its IDs are mapped; it ends in the
 * function's exec. A container made ahead (start_fd >= 0) says it is ready
 * on ready_fd, then waits for its start on start_fd, right before the exec,
 * as a warm container waits in crun for ocifn's start. */
static void container(int start_fd, int ready_fd)
{
	if (unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP) < 0)
		fail("unshare");
	if (setresgid(0, 0, 0) < 0 || setresuid(0, 0, 0) < 0 || setgroups(0, NULL) < 0)
		fail("becoming root of the user namespace");
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		fail("making / private");
	if (mount(cfg.rootfs, cfg.rootfs, NULL, MS_BIND | MS_REC, NULL) < 0)
		fail(cfg.rootfs);
	if ((root_fd = open(cfg.rootfs, O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0)
		fail(cfg.rootfs);
	for (int i = 0; i < cfg.n_mounts; i++)
		do_mount(&cfg.mounts[i]);
	for (int i = 0; i < cfg.n_masked; i++)
		mask(cfg.masked[i]);
	if (cfg.hostname && sethostname(cfg.hostname, strlen(cfg.hostname)) < 0)
		fail("sethostname");
	loopback_up();
	if (cfg.readonly_root &&
	    mount(NULL, cfg.rootfs, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | locked_flags(cfg.rootfs), NULL) < 0)
		fail("remounting the root read-only");
	if (chdir(cfg.rootfs) < 0 || syscall(SYS_pivot_root, ".", ".") < 0 || umount2(".", MNT_DETACH) < 0)
		fail("pivot_root");
	if (chdir(cfg.cwd ? cfg.cwd : "/") < 0)
		fail("chdir");
	for (int i = 0; i < cfg.n_rlimits; i++)
		if (setrlimit(cfg.rlimits[i].resource, &cfg.rlimits[i].limit) < 0)
			fail("setrlimit");
	drop_capabilities();
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		fail("no_new_privs");
	/* crun's default flag: the filter does not turn on speculation
	 * mitigations that the containers would not have either. */
	if (cfg.bpf.len && syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_SPEC_ALLOW, &cfg.bpf) < 0)
		fail("seccomp");
	/* Every signal at its default and none blocked, as crun leaves them
	 * (the loop ignores SIGPIPE, and whatever started the bench may have
	 * ignored others); the real-time signals libc reserves stay as they
	 * were, in crun too, since sigaction refuses them. */
	for (int sig = 1; sig < NSIG; sig++)
		signal(sig, SIG_DFL);
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	if (start_fd >= 0) {
		char c;
		if (write(ready_fd, "r", 1) != 1 || read(start_fd, &c, 1) != 1)
			_exit(127); /* the worker let it go unstarted */
	}
	execve(cfg.argv[0], cfg.argv, cfg.env);
	fail(cfg.argv[0]);
}

static void write_map(pid_t pid, const char *file, const char *map)
{
	char path[64], line[128];
	snprintf(path, sizeof path, "/proc/%d/%s", pid, file);
	int n = snprintf(line, sizeof line, "%s\n", map);
	for (char *c = line; *c; c++)
		if (*c == ':')
			*c = ' ';
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0 || write(fd, line, n) != n)
		die(path);
	close(fd);
}

/* answer writes the request to a started container's stdin, reads what
 * the function prints until it closes its stdout, and reaps it; it reports
 * whether the function answered. It closes in and out. */
static int answer(pid_t pid, int in, int out)
{
	/* Requests fit in a pipe's buffer; a function that exits without
	 * reading it makes this fail (EPIPE: SIGPIPE is ignored), which is its
	 * right. */
	(void) !write(in, cfg.input, cfg.input_len);
	close(in);
	char buf[65536];
	size_t got = 0;
	ssize_t r;
	int keep = cfg.out_path ? open(cfg.out_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644) : -1;
	while ((r = read(out, buf, sizeof buf)) > 0 || (r < 0 && errno == EINTR)) {
		if (r > 0)
			got += r;
		if (r > 0 && keep >= 0 && write(keep, buf, r) != r)
			die(cfg.out_path);
	}
	int read_failed = r < 0;
	if (keep >= 0)
		close(keep);
	close(out);
	int status;
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			die("waitpid");
	return ! read_failed && WIFEXITED(status) && WEXITSTATUS(status) == 0 && got > 0;
}

/* held_ns are the namespaces a worker holds from a container's readiness
 * to its answer, as ocifn does (bundle/runtime.go, heldNamespaces): those
 * whose teardown would otherwise follow the function's exit on the call's
 * path (the mount namespace's), or beside it in kernel workers (the network
 * and IPC namespaces'). */
static const char *const held_ns[] = { "mnt", "net", "ipc" };
#define N_HELD (sizeof held_ns / sizeof held_ns[0])

/* A container and the worker's ends of its pipes. */
struct ctr {
	pid_t pid;
	int in, out;	 /* its stdin and stdout */
	int start;	 /* made ahead: written to start it */
	int ready;	 /* made ahead: readable once it waits for its start */
	int ns[N_HELD];	 /* made ahead and ready: its namespaces in held_ns, held */
};

/* close_all_but closes every descriptor from 3 up but those in keep[0..2]
 * (-1: none), as crun closes what ocifn does not pass: the function gets
 * its standard streams and nothing else, neither what the loop inherited
 * nor an end of another container's pipes (one that held the write end of
 * another's stdin would keep that function from ever reading to its
 * end). */
static void close_all_but(int keep[3])
{
	for (int i = 0; i < 3; i++)
		for (int j = i + 1; j < 3; j++)
			if (keep[j] < keep[i]) {
				int t = keep[i];
				keep[i] = keep[j];
				keep[j] = t;
			}
	unsigned int lo = 3;
	for (int i = 0; i < 3; i++) {
		if (keep[i] < (int) lo)
			continue;
		if ((unsigned int) keep[i] > lo && syscall(SYS_close_range, lo, keep[i] - 1, 0) < 0)
			fail("close_range");
		lo = keep[i] + 1;
	}
	if (syscall(SYS_close_range, lo, ~0U, 0) < 0)
		fail("close_range");
}

/* make clones a container's process into new user and PID namespaces and
 * lets it set up the rest once its IDs are mapped. ahead makes it wait for
 * its start (see container); otherwise it goes straight on to the exec. */
static void make(struct ctr *c, int ahead)
{
	int in[2], out[2], go[2], start[2] = { -1, -1 }, ready[2] = { -1, -1 };
	if (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0 || pipe2(go, O_CLOEXEC) < 0 ||
	    (ahead && (pipe2(start, O_CLOEXEC) < 0 || pipe2(ready, O_CLOEXEC) < 0)))
		die("pipe");
	pid_t pid = syscall(SYS_clone, CLONE_NEWUSER | CLONE_NEWPID | SIGCHLD, NULL, NULL, NULL, NULL);
	if (pid < 0)
		die("clone");
	if (pid == 0) {
		char x;
		if (dup2(in[0], 0) < 0 || dup2(out[1], 1) < 0)
			fail("dup2");
		int keep[3] = { go[0], start[0], ready[1] };
		close_all_but(keep);
		if (read(go[0], &x, 1) != 1)
			_exit(127); /* the parent could not map the IDs */
		close(go[0]);
		container(start[0], ready[1]);
	}
	close(in[0]);
	close(out[1]);
	close(go[0]);
	if (ahead) {
		close(start[0]);
		close(ready[1]);
	}
	if (cfg.uid_map)
		write_map(pid, "uid_map", cfg.uid_map);
	if (cfg.gid_map)
		write_map(pid, "gid_map", cfg.gid_map);
	if (write(go[1], "x", 1) != 1)
		die("starting the child");
	close(go[1]);
	*c = (struct ctr) { .pid = pid, .in = in[1], .out = out[0], .start = start[1], .ready = ready[0] };
	for (size_t i = 0; i < N_HELD; i++)
		c->ns[i] = -1;
}

/* kill_reap kills a container's process, started or not, and reaps it. */
static void kill_reap(pid_t pid)
{
	kill(pid, SIGKILL);
	while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
		;
}

/* call runs one call in a container made for it and returns its latency,
 * or 0 if the function did not answer. */
static int64_t call(void)
{
	int64_t t = now_ns();
	struct ctr c;
	make(&c, 0);
	return answer(c.pid, c.in, c.out) ? now_ns() - t : 0;
}

/* ready waits, if wait, for a container made ahead to be ready, and then
 * opens its namespaces in held_ns. It returns 1 once the container is ready, 0
 * if it is not yet (without wait), and -1 if it failed to set up. */
static int ready(struct ctr *c, int wait)
{
	if (c->ns[0] >= 0)
		return 1;
	struct pollfd p = { .fd = c->ready, .events = POLLIN };
	if (!wait && poll(&p, 1, 0) == 0)
		return 0;
	char x, path[64];
	if (read(c->ready, &x, 1) != 1)
		return -1; /* it exited: its error is on stderr */
	for (size_t i = 0; i < N_HELD; i++) {
		snprintf(path, sizeof path, "/proc/%d/ns/%s", c->pid, held_ns[i]);
		if ((c->ns[i] = open(path, O_RDONLY | O_CLOEXEC)) < 0)
			die(path);
	}
	return 1;
}

/* call_ahead runs one call in a container made ahead and returns its
 * latency, or 0 if the function did not answer. The time runs from the
 * start, or from the wait for a container still setting up, to the reaped
 * exit; the container's namespaces are let go of after that. */
static int64_t call_ahead(struct ctr *c)
{
	int r = ready(c, 0);
	int64_t t = now_ns();
	if (r == 0)
		r = ready(c, 1);
	int ok = r > 0 && write(c->start, "s", 1) == 1;
	close(c->start);
	close(c->ready);
	if (!ok) {
		close(c->in);
		close(c->out);
		kill_reap(c->pid);
	} else {
		ok = answer(c->pid, c->in, c->out);
	}
	int64_t d = now_ns() - t;
	for (size_t i = 0; i < N_HELD; i++)
		if (c->ns[i] >= 0)
			close(c->ns[i]);
	return ok ? d : 0;
}

static unsigned long mount_flag(const char *name)
{
	static const struct {
		const char *name;
		unsigned long flag;
	} flags[] = {
		{ "ro", MS_RDONLY },   { "nosuid", MS_NOSUID },	 { "nodev", MS_NODEV },	 { "noexec", MS_NOEXEC },
		{ "bind", MS_BIND },   { "rbind", MS_BIND | MS_REC }, { "relatime", MS_RELATIME }, { "strictatime", MS_STRICTATIME },
		{ "noatime", MS_NOATIME },
	};
	for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
		if (strcmp(name, flags[i].name) == 0)
			return flags[i].flag;
	fprintf(stderr, "isolate: unknown mount flag %s\n", name);
	exit(2);
}

static const struct {
	const char *name;
	int resource;
} resources[] = {
	{ "RLIMIT_NOFILE", RLIMIT_NOFILE }, { "RLIMIT_NPROC", RLIMIT_NPROC }, { "RLIMIT_CORE", RLIMIT_CORE },
	{ "RLIMIT_DATA", RLIMIT_DATA },	    { "RLIMIT_AS", RLIMIT_AS },	      { "RLIMIT_STACK", RLIMIT_STACK },
	{ "RLIMIT_FSIZE", RLIMIT_FSIZE },   { "RLIMIT_CPU", RLIMIT_CPU },     { "RLIMIT_MEMLOCK", RLIMIT_MEMLOCK },
};

static void parse(int argc, char **argv)
{
	int c;
	while ((c = getopt(argc, argv, "r:i:c:t:n:p:W:u:g:m:M:Rh:l:s:w:e:o:")) != -1) {
		if (strchr("mMle", c) && (cfg.n_mounts >= MAX_ITEMS || cfg.n_masked >= MAX_ITEMS ||
					  cfg.n_rlimits >= MAX_ITEMS || cfg.n_env >= MAX_ITEMS))
			usage("too many -m, -M, -l or -e arguments");
		switch (c) {
		case 'r': cfg.rootfs = optarg; break;
		case 'i': cfg.request = optarg; break;
		case 'u': cfg.uid_map = optarg; break;
		case 'g': cfg.gid_map = optarg; break;
		case 'R': cfg.readonly_root = 1; break;
		case 'h': cfg.hostname = optarg; break;
		case 's': cfg.bpf_path = optarg; break;
		case 'w': cfg.cwd = optarg; break;
		case 'o': cfg.out_path = optarg; break;
		case 'e': cfg.env[cfg.n_env++] = optarg; break;
		case 'M': cfg.masked[cfg.n_masked++] = optarg; break;
		case 'm': {
			struct mnt *m = &cfg.mounts[cfg.n_mounts++];
			m->type = optarg;
			m->source = split(m->type);
			m->dest = split(m->source);
			char *flags = split(m->dest);
			m->data = split(flags);
			for (char *f = strtok(flags, ","); f; f = strtok(NULL, ","))
				m->flags |= mount_flag(f);
			break;
		}
		case 'l': {
			char *soft = split(optarg), *hard = split(soft);
			size_t i;
			for (i = 0; i < sizeof resources / sizeof resources[0]; i++)
				if (strcmp(optarg, resources[i].name) == 0)
					break;
			if (i == sizeof resources / sizeof resources[0])
				usage("unknown rlimit");
			cfg.rlimits[cfg.n_rlimits].resource = resources[i].resource;
			cfg.rlimits[cfg.n_rlimits].limit.rlim_cur = strtoull(soft, NULL, 10);
			cfg.rlimits[cfg.n_rlimits].limit.rlim_max = strtoull(hard, NULL, 10);
			cfg.n_rlimits++;
			break;
		}
		case 'c': case 't': case 'n': case 'p': case 'W': break; /* read by main */
		default: usage("unknown option");
		}
	}
	if (cfg.rootfs == NULL || cfg.request == NULL || optind >= argc)
		usage("-r, -i and a program are needed");
	cfg.argv = argv + optind;
	cfg.input = read_file(cfg.request, &cfg.input_len);
	if (cfg.bpf_path) {
		size_t n;
		char *b = read_file(cfg.bpf_path, &n);
		if (n % sizeof(struct sock_filter))
			usage("the seccomp program is not whole BPF instructions");
		cfg.bpf.filter = (struct sock_filter *) b;
		cfg.bpf.len = n / sizeof(struct sock_filter);
	}
}

int main(int argc, char **argv)
{
	int clients = 1, max_calls = 2000, ahead = 0;
	double seconds = 3, rate = 0;
	for (int i = 1; i + 1 < argc && strcmp(argv[i], "--"); i++) {
		if (!strcmp(argv[i], "-c"))
			clients = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "-t"))
			seconds = atof(argv[i + 1]);
		else if (!strcmp(argv[i], "-n"))
			max_calls = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "-p"))
			rate = atof(argv[i + 1]);
		else if (!strcmp(argv[i], "-W"))
			ahead = atoi(argv[i + 1]);
	}
	parse(argc, argv);
	if (clients < 1 || max_calls < 1)
		usage("-c and -n must be positive");
	if (ahead < 0 || ahead > MAX_AHEAD)
		usage("-W must be from 0 to 16");
	if (rate < 0)
		usage("-p must not be negative");

	/* Each worker sends the latency of each call it made (0: it failed) on
	 * one pipe; its calls end at the deadline or at its share of -n. */
	int lat[2];
	if (pipe2(lat, O_CLOEXEC) < 0)
		die("pipe");
	signal(SIGPIPE, SIG_IGN);
	int64_t start = now_ns();
	int64_t deadline = start + (int64_t) (seconds * 1e9);
	for (int w = 0; w < clients; w++) {
		pid_t pid = fork();
		if (pid < 0)
			die("fork");
		if (pid == 0) {
			close(lat[0]);
			int share = max_calls / clients + (w < max_calls % clients);
			struct ctr pool[MAX_AHEAD];
			for (int i = 0; i < ahead; i++)
				make(&pool[i], 1);
			for (int i = 0; i < ahead; i++)
				ready(&pool[i], 1); /* one that failed fails its call */
			int64_t due = now_ns();
			for (int i = 0; i < share && now_ns() < deadline; i++) {
				if (rate > 0) {
					int64_t wait = due - now_ns();
					if (wait > 0)
						nanosleep(&(struct timespec) { .tv_sec = wait / 1000000000, .tv_nsec = wait % 1000000000 }, NULL);
					due += (int64_t) (1e9 / rate);
					if (now_ns() >= deadline)
						break;
				}
				int k = ahead ? i % ahead : -1; /* the oldest made ahead */
				int64_t d = ahead ? call_ahead(&pool[k]) : call();
				if (write(lat[1], &d, sizeof d) != sizeof d)
					_exit(2);
				if (ahead) {
					make(&pool[k], 1); /* after the answer, as ocifn refills its pool */
					for (int j = 0; j < ahead; j++)
						if (j != k)
							ready(&pool[j], 0);
				}
			}
			for (int i = 0; i < ahead; i++)
				kill_reap(pool[i].pid);
			_exit(0);
		}
	}
	close(lat[1]);
	int64_t *lats = malloc(sizeof(int64_t) * max_calls), d;
	if (lats == NULL)
		die("malloc");
	int n = 0, errors = 0;
	while (read(lat[0], &d, sizeof d) == sizeof d) {
		if (d == 0)
			errors++;
		else if (n < max_calls)
			lats[n++] = d;
	}
	/* A worker that died (a pipe, a clone or an ID mapping that failed)
	 * fails the run: its calls were not made. */
	int status, failed = 0;
	while (wait(&status) > 0)
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			failed = 1;
	int64_t elapsed = now_ns() - start;
	if (failed) {
		fprintf(stderr, "isolate: a worker failed\n");
		return 2;
	}
	printf("calls %d errors %d elapsed %lld\n", n, errors, (long long) elapsed);
	for (int i = 0; i < n; i++)
		printf("%lld\n", (long long) lats[i]);
	return 0;
}
