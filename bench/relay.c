/* The floor of a user-space relay, for bench/proxy.py: the least a program can do to pass
 * a TCP stream from one loopback connection to another, with none of the proxy's checks.
 *
 *     relay LISTEN_FD UPSTREAM_PORT MODE      MODE: 0 copy (read/write, 1 MiB), 1 splice
 *
 * Accepts on the listening socket it is given, connects each client to
 * 127.0.0.1:UPSTREAM_PORT, and moves bytes both ways in a forked child until one side
 * ends. No parsing, no limits, no threads: what it costs is the kernel's part alone. */
#define _GNU_SOURCE
#include <arpa/inet.h>
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
