/*
 * delay.c
 *	  The packet delay of test/faults, for kernels without tc netem: the
 *	  packets an iptables NFQUEUE rule of its network namespace hands to
 *	  queue QUEUE are held DELAY_MS (plus a random 0..JITTER_MS) and then
 *	  let through, in the order they came.  Lost or late packets are TCP's
 *	  to deal with, as on a slow link.
 *
 *	delay QUEUE DELAY_MS JITTER_MS
 *
 * Runs until SIGTERM.  The rule that feeds it carries --queue-bypass, so
 * that packets pass undelayed when it is not running.  Each packet's
 * release time is at least the one before it, so jitter never reorders.
 */
#define _DEFAULT_SOURCE

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>

#include <linux/netfilter.h>
#include <libnetfilter_queue/libnetfilter_queue.h>

#define HELD_MAX 65536

typedef struct Held
{
	uint32_t	id;
	double		release;
} Held;

static Held held[HELD_MAX];
static size_t head,
			count;
static double delay_s,
			jitter_s,
			last_release;
static volatile sig_atomic_t stopping = 0;

static double
mono_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void
on_term(int signo)
{
	(void) signo;
	stopping = 1;
}

/* a packet came: hold it (a full queue lets it through at once) */
static int
on_packet(struct nfq_q_handle *qh, struct nfgenmsg *msg, struct nfq_data *nfa, void *data)
{
	struct nfqnl_msg_packet_hdr *ph = nfq_get_msg_packet_hdr(nfa);
	uint32_t	id;
	double		release;

	(void) msg;
	(void) data;
	if (ph == NULL)
		return 0;
	id = ntohl(ph->packet_id);
	if (count == HELD_MAX)
		return nfq_set_verdict(qh, id, NF_ACCEPT, 0, NULL);
	release = mono_s() + delay_s + jitter_s * (random() / (double) RAND_MAX);
	if (release < last_release)
		release = last_release;
	last_release = release;
	held[(head + count++) % HELD_MAX] = (Held) {id, release};
	return 0;
}

int
main(int argc, char **argv)
{
	struct nfq_handle *h;
	struct nfq_q_handle *qh;
	struct sigaction sa;
	char		buf[65536];
	int			fd;

	if (argc != 4)
	{
		fprintf(stderr, "usage: %s QUEUE DELAY_MS JITTER_MS\n", argv[0]);
		return 2;
	}
	delay_s = atof(argv[2]) / 1000;
	jitter_s = atof(argv[3]) / 1000;
	srandom(getpid());
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_term;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);

	h = nfq_open();
	if (h == NULL || nfq_bind_pf(h, AF_INET) < 0)
	{
		perror("delay: nfq_open");
		return 1;
	}
	qh = nfq_create_queue(h, atoi(argv[1]), on_packet, NULL);
	if (qh == NULL || nfq_set_mode(qh, NFQNL_COPY_META, 0) < 0)
	{
		perror("delay: nfq_create_queue");
		return 1;
	}
	nfq_set_queue_maxlen(qh, HELD_MAX);
	fd = nfq_fd(h);
	printf("delay: queue %s, %s ms + up to %s ms\n", argv[1], argv[2], argv[3]);
	fflush(stdout);

	while (!stopping)
	{
		struct pollfd pfd = {.fd = fd,.events = POLLIN};
		double		now = mono_s();
		int			timeout = 100;
		ssize_t		n;

		while (count > 0 && held[head].release <= now)
		{
			nfq_set_verdict(qh, held[head].id, NF_ACCEPT, 0, NULL);
			head = (head + 1) % HELD_MAX;
			count--;
		}
		if (count > 0)
			timeout = (int) ((held[head].release - now) * 1000) + 1;
		if (poll(&pfd, 1, timeout) < 0 && errno != EINTR)
			break;
		if (pfd.revents & POLLIN)
		{
			n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
			if (n > 0)
				nfq_handle_packet(h, buf, (int) n);
		}
	}
	/* what is still held goes through now */
	while (count > 0)
	{
		nfq_set_verdict(qh, held[head].id, NF_ACCEPT, 0, NULL);
		head = (head + 1) % HELD_MAX;
		count--;
	}
	nfq_destroy_queue(qh);
	nfq_close(h);
	return 0;
}
