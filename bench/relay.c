/* The floor of a user-space relay, for bench/proxy.py: the least a program can do to pass
 * a TCP stream from one loopback connection to another, with none of the proxy's checks.
 *
 *     relay LISTEN_FD UPSTREAM_PORT MODE      MODE: 0 copy (read/write, 1 MiB), 1 splice,
 *                                             2 sockmap (the kernel moves the bytes; root)
 *
 * Accepts on the listening socket it is given, connects each client to
 * 127.0.0.1:UPSTREAM_PORT, and moves bytes both ways in a forked child until one side
 * ends. No parsing, no limits, no threads: what it costs is the kernel's part alone. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <linux/bpf.h>
#include <linux/tcp.h>
#include <stddef.h>
#include <string.h>
#include <sys/syscall.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static char buf[1 << 20];

static int move(int from, int to, int mode, int pipe_r, int pipe_w) {
    ssize_t n = mode ? splice(from, NULL, pipe_w, NULL, sizeof buf, SPLICE_F_MOVE)
                     : read(from, buf, sizeof buf);
    if (n <= 0)
        return -1;
    for (ssize_t done = 0; done < n;) {
        ssize_t w = mode ? splice(pipe_r, NULL, to, NULL, n - done, SPLICE_F_MOVE)
                         : write(to, buf + done, n - done);
        if (w <= 0)
            return -1;
        done += w;
    }
    return 0;
}

static int bpf(int cmd, union bpf_attr *a) { return syscall(__NR_bpf, cmd, a, sizeof *a); }

/* Mode 2: a BPF sockmap holding both sockets, with a stream verdict program that sends
 * each segment arriving on one to the other: no byte reaches this process. The program
 * tells the sides apart by the local port (the client side's is the listener's). At the
 * upstream's end it waits until the client acknowledged what the upstream sent. 1: no
 * BPF here (not root, or a kernel without sockmap). */
static int kernel_relay(int client, int server, int listen_port) {
    union bpf_attr a;
    memset(&a, 0, sizeof a);
    a.map_type = BPF_MAP_TYPE_SOCKMAP;
    a.key_size = a.value_size = 4;
    a.max_entries = 2;
    int map = bpf(BPF_MAP_CREATE, &a);
    if (map < 0)
        return 1;
    struct bpf_insn prog[] = {
        {.code = BPF_LDX | BPF_MEM | BPF_W, .dst_reg = 2, .src_reg = 1, .off = offsetof(struct __sk_buff, local_port)},
        {.code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = 3, .imm = 0},
        {.code = BPF_JMP | BPF_JNE | BPF_K, .dst_reg = 2, .off = 1, .imm = listen_port},
        {.code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = 3, .imm = 1},
        {.code = BPF_LD | BPF_DW | BPF_IMM, .dst_reg = 2, .src_reg = BPF_PSEUDO_MAP_FD, .imm = map},
        {0},
        {.code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = 4, .imm = 0},
        {.code = BPF_JMP | BPF_CALL, .imm = BPF_FUNC_sk_redirect_map},
        {.code = BPF_JMP | BPF_EXIT},
    };
    memset(&a, 0, sizeof a);
    a.prog_type = BPF_PROG_TYPE_SK_SKB;
    a.insns = (unsigned long)prog;
    a.insn_cnt = sizeof prog / sizeof prog[0];
    a.license = (unsigned long)"GPL";
    int prog_fd = bpf(BPF_PROG_LOAD, &a);
    if (prog_fd < 0)
        return 1;
    memset(&a, 0, sizeof a);
    a.target_fd = map;
    a.attach_bpf_fd = prog_fd;
    a.attach_type = BPF_SK_SKB_STREAM_VERDICT;
    if (bpf(BPF_PROG_ATTACH, &a) < 0)
        return 1;
    int fds[2] = {client, server};
    for (int k = 0; k < 2; k++) {
        memset(&a, 0, sizeof a);
        a.map_fd = map;
        a.key = (unsigned long)&k;
        a.value = (unsigned long)&fds[k];
        if (bpf(BPF_MAP_UPDATE_ELEM, &a) < 0)
            return 1;
    }
    /* What the client sent before its socket was in the map (the benchmark's request: the
     * size it asks for, after which it only reads) stays in the queue no program sees:
     * passed on by hand, once. */
    char head[4096];
    ssize_t got = recv(client, head, sizeof head, MSG_DONTWAIT);
    if (got > 0 && write(server, head, got) != got)
        return 1;
    struct pollfd pf[2] = {{client, POLLRDHUP, 0}, {server, POLLRDHUP, 0}};
    while (poll(pf, 2, -1) >= 0 && !((pf[0].revents | pf[1].revents) & (POLLRDHUP | POLLHUP | POLLERR)))
        ;
    for (int i = 0; i < 20000; i++) {
        struct tcp_info up, down;
        socklen_t n = sizeof up;
        getsockopt(server, IPPROTO_TCP, TCP_INFO, &up, &n);
        n = sizeof down;
        getsockopt(client, IPPROTO_TCP, TCP_INFO, &down, &n);
        if (down.tcpi_bytes_acked >= up.tcpi_bytes_received)
            break;
        usleep(100);
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 4)
        return 2;
    int listener = atoi(argv[1]), mode = atoi(argv[3]);
    struct sockaddr_in up = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[2])),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    for (;;) {
        int client = accept(listener, NULL, NULL);
        if (client < 0)
            return 1;
        if (fork() != 0) {
            close(client);
            while (waitpid(-1, NULL, WNOHANG) > 0)
                ;
            continue;
        }
        int server = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(server, (struct sockaddr *)&up, sizeof up) != 0)
            _exit(1);
        if (mode == 2) {
            struct sockaddr_in me;
            socklen_t len = sizeof me;
            getsockname(client, (struct sockaddr *)&me, &len);
            _exit(kernel_relay(client, server, ntohs(me.sin_port)));
        }
        int p[2];
        if (pipe(p) != 0)
            _exit(1);
        fcntl(p[1], F_SETPIPE_SZ, 1 << 20);
        struct pollfd fds[2] = {{client, POLLIN, 0}, {server, POLLIN, 0}};
        for (;;) {
            if (poll(fds, 2, -1) < 0)
                _exit(1);
            if (fds[0].revents && move(client, server, mode, p[0], p[1]) != 0)
                _exit(0);
            if (fds[1].revents && move(server, client, mode, p[0], p[1]) != 0)
                _exit(0);
        }
    }
}
