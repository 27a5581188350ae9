/* A byte relay for scripts/exec_rt.py's `relay` mode: listens on 127.0.0.1:PORT and
 * relays each accepted connection (one at a time) both ways to the Unix socket PATH,
 * with no parsing: what a process in the middle costs an exec round trip by itself.
 * Usage: exec_relay PORT PATH */
#define _GNU_SOURCE
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s PORT PATH\n", argv[0]);
        return 2;
    }
    int one = 1;
    int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in at = {.sin_family = AF_INET,
                             .sin_port = htons(atoi(argv[1])),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (bind(listener, (void *)&at, sizeof at) || listen(listener, 4)) {
        perror("listen");
        return 1;
    }
    for (;;) {
        int client = accept4(listener, NULL, NULL, SOCK_CLOEXEC);
        if (client < 0)
            continue;
        setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        int agent = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_un path = {.sun_family = AF_UNIX};
        strncpy(path.sun_path, argv[2], sizeof path.sun_path - 1);
        if (connect(agent, (void *)&path, sizeof path)) {
            perror("connect");
            close(client);
            close(agent);
            continue;
        }
        struct pollfd fds[2] = {{client, POLLIN, 0}, {agent, POLLIN, 0}};
        static char buf[1 << 16];
        for (int open = 1; open && poll(fds, 2, -1) > 0;) {
            for (int i = 0; i < 2 && open; i++) {
                if (!fds[i].revents)
                    continue;
                ssize_t n = read(fds[i].fd, buf, sizeof buf);
                open = n > 0 && write(fds[1 - i].fd, buf, n) == n;
            }
        }
        close(client);
        close(agent);
    }
}
