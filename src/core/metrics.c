/* metrics: see metrics.h. */
#include "core/metrics.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

enum type { COUNTER, GAUGE, HISTOGRAM };

static const char *const type_names[] = {"counter", "gauge", "histogram"};

const int64_t kvc_metrics_bounds_ns[KVC_METRICS_BUCKETS] = {
	1000,       2500,       5000,       10000,      25000,      50000,
	100000,     250000,     500000,     1000000,    2500000,    5000000,
	10000000,   25000000,   50000000,   100000000,  250000000,  500000000,
	1000000000, 2500000000, 5000000000, 10000000000,
};

/* The same bounds as the exposition writes them (le="..."), in seconds. */
static const char *const bound_text[KVC_METRICS_BUCKETS] = {
	"0.000001", "0.0000025", "0.000005", "0.00001", "0.000025", "0.00005",
	"0.0001",   "0.00025",   "0.0005",   "0.001",   "0.0025",   "0.005",
	"0.01",     "0.025",     "0.05",     "0.1",     "0.25",     "0.5",
	"1",        "2.5",       "5",        "10",
};

struct series {
	struct series *next;
	int label_count;
	char *labels[KVC_METRICS_MAX_LABELS][2]; /* name, value (owned) */
	union {
		struct kvc_metrics_counter counter;
		struct kvc_metrics_gauge gauge;
		struct kvc_metrics_histogram histogram;
	} u;
};

struct family {
	struct family *next;
	char *name;
	char *help;
	enum type type;
	struct series *first, **last;
};

struct collector {
	struct collector *next;
	void (*collect)(void *arg);
	void *arg;
};

struct kvc_metrics {
	/* Lock order: collect_lock, then lock. collect_lock guards the
	 * collectors (and makes scrapes run them one at a time); lock the
	 * families and their series lists. */
	pthread_mutex_t collect_lock;
	pthread_mutex_t lock;
	struct family *families, **last_family;
	struct collector *collectors, **last_collector;
};

int kvc_metrics_bucket_of(int64_t ns)
{
	int lo = 0, hi = KVC_METRICS_BUCKETS; /* the answer is in [lo, hi] */
	while (lo < hi) {
		int mid = (lo + hi) / 2;
		if (kvc_metrics_bounds_ns[mid] >= ns)
			hi = mid;
		else
			lo = mid + 1;
	}
	return lo;
}

struct kvc_metrics *kvc_metrics_create(void)
{
	struct kvc_metrics *m = calloc(1, sizeof(*m));
	if (!m)
		return NULL;
	pthread_mutex_init(&m->collect_lock, NULL);
	pthread_mutex_init(&m->lock, NULL);
	m->last_family = &m->families;
	m->last_collector = &m->collectors;
	return m;
}

static void free_series(struct series *s)
{
	for (int i = 0; i < s->label_count; i++) {
		free(s->labels[i][0]);
		free(s->labels[i][1]);
	}
	free(s);
}

void kvc_metrics_destroy(struct kvc_metrics *m)
{
	if (!m)
		return;
	for (struct family *f = m->families, *fn; f; f = fn) {
		fn = f->next;
		for (struct series *s = f->first, *sn; s; s = sn) {
			sn = s->next;
			free_series(s);
		}
		free(f->name);
		free(f->help);
		free(f);
	}
	for (struct collector *c = m->collectors, *cn; c; c = cn) {
		cn = c->next;
		free(c);
	}
	pthread_mutex_destroy(&m->lock);
	pthread_mutex_destroy(&m->collect_lock);
	free(m);
}

/* [a-zA-Z_:][a-zA-Z0-9_:]* for metric names; labels: no ':'. */
static bool valid_name(const char *name, bool colon)
{
	if (!name || !*name || (*name >= '0' && *name <= '9'))
		return false;
	for (const char *p = name; *p; p++) {
		bool ok = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		          (*p >= '0' && *p <= '9') || *p == '_' || (colon && *p == ':');
		if (!ok)
			return false;
	}
	return true;
}

static bool same_labels(const struct series *s, const struct kvc_metrics_label *labels,
                        int count)
{
	if (s->label_count != count)
		return false;
	for (int i = 0; i < count; i++)
		if (strcmp(s->labels[i][0], labels[i].name) ||
		    strcmp(s->labels[i][1], labels[i].value))
			return false;
	return true;
}

static struct series *new_series(const struct kvc_metrics_label *labels, int count)
{
	struct series *s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	for (int i = 0; i < count; i++) {
		s->labels[i][0] = strdup(labels[i].name);
		s->labels[i][1] = strdup(labels[i].value);
		s->label_count = i + 1;
		if (!s->labels[i][0] || !s->labels[i][1]) {
			free_series(s);
			return NULL;
		}
	}
	return s;
}

/* The family `name` of type (made if new), or NULL. Called locked. */
static struct family *family_of(struct kvc_metrics *m, const char *name, const char *help,
                                enum type type)
{
	for (struct family *f = m->families; f; f = f->next)
		if (strcmp(f->name, name) == 0)
			return f->type == type ? f : NULL;
	struct family *f = calloc(1, sizeof(*f));
	if (!f)
		return NULL;
	f->name = strdup(name);
	f->help = strdup(help ? help : "");
	if (!f->name || !f->help) {
		free(f->name);
		free(f->help);
		free(f);
		return NULL;
	}
	f->type = type;
	f->last = &f->first;
	*m->last_family = f;
	m->last_family = &f->next;
	return f;
}

static struct series *do_register(struct kvc_metrics *m, const char *name, const char *help,
                                  enum type type, const struct kvc_metrics_label *labels,
                                  int count)
{
	if (!m || !valid_name(name, true) || count < 0 || count > KVC_METRICS_MAX_LABELS ||
	    (count > 0 && !labels))
		return NULL;
	for (int i = 0; i < count; i++)
		if (!valid_name(labels[i].name, false) || !labels[i].value ||
		    strcmp(labels[i].name, "le") == 0)
			return NULL;
	struct series *found = NULL;
	pthread_mutex_lock(&m->lock);
	struct family *f = family_of(m, name, help, type);
	for (struct series *s = f ? f->first : NULL; s && !found; s = s->next)
		if (same_labels(s, labels, count))
			found = s;
	if (f && !found) {
		found = new_series(labels, count);
		if (found) {
			*f->last = found;
			f->last = &found->next;
		}
	}
	pthread_mutex_unlock(&m->lock);
	return found;
}

struct kvc_metrics_counter *kvc_metrics_counter(struct kvc_metrics *m, const char *name,
                                                const char *help,
                                                const struct kvc_metrics_label *labels,
                                                int label_count)
{
	struct series *s = do_register(m, name, help, COUNTER, labels, label_count);
	return s ? &s->u.counter : NULL;
}

struct kvc_metrics_gauge *kvc_metrics_gauge(struct kvc_metrics *m, const char *name,
                                            const char *help,
                                            const struct kvc_metrics_label *labels,
                                            int label_count)
{
	struct series *s = do_register(m, name, help, GAUGE, labels, label_count);
	return s ? &s->u.gauge : NULL;
}

struct kvc_metrics_histogram *kvc_metrics_histogram(struct kvc_metrics *m, const char *name,
                                                    const char *help,
                                                    const struct kvc_metrics_label *labels,
                                                    int label_count)
{
	struct series *s = do_register(m, name, help, HISTOGRAM, labels, label_count);
	return s ? &s->u.histogram : NULL;
}

int kvc_metrics_collector(struct kvc_metrics *m, void (*collect)(void *arg), void *arg)
{
	if (!m || !collect)
		return -EINVAL;
	struct collector *c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->collect = collect;
	c->arg = arg;
	pthread_mutex_lock(&m->collect_lock);
	*m->last_collector = c;
	m->last_collector = &c->next;
	pthread_mutex_unlock(&m->collect_lock);
	return 0;
}

/* Text with backslash and newline escaped, and double quote when in a
 * label value. */
static void escaped(FILE *out, const char *text, bool quote)
{
	for (const char *p = text; *p; p++) {
		if (*p == '\\')
			fputs("\\\\", out);
		else if (*p == '\n')
			fputs("\\n", out);
		else if (quote && *p == '"')
			fputs("\\\"", out);
		else
			fputc(*p, out);
	}
}

/* name{labels[,le="bound"]} (no braces when there is nothing in them). */
static void series_name(FILE *out, const char *name, const char *suffix,
                        const struct series *s, const char *le)
{
	fputs(name, out);
	fputs(suffix, out);
	if (s->label_count == 0 && !le)
		return;
	fputc('{', out);
	for (int i = 0; i < s->label_count; i++) {
		fprintf(out, "%s%s=\"", i ? "," : "", s->labels[i][0]);
		escaped(out, s->labels[i][1], true);
		fputc('"', out);
	}
	if (le)
		fprintf(out, "%sle=\"%s\"", s->label_count ? "," : "", le);
	fputc('}', out);
}

static void render_histogram(FILE *out, const char *name, const struct series *s)
{
	const struct kvc_metrics_histogram *h = &s->u.histogram;
	uint64_t total = 0;
	for (int b = 0; b <= KVC_METRICS_BUCKETS; b++) {
		total += atomic_load_explicit(&h->buckets[b], memory_order_relaxed);
		series_name(out, name, "_bucket", s, b < KVC_METRICS_BUCKETS ? bound_text[b] : "+Inf");
		fprintf(out, " %llu\n", (unsigned long long)total);
	}
	uint64_t sum = atomic_load_explicit(&h->sum_ns, memory_order_relaxed);
	series_name(out, name, "_sum", s, NULL);
	fprintf(out, " %llu.%09llu\n", (unsigned long long)(sum / 1000000000),
	        (unsigned long long)(sum % 1000000000));
	series_name(out, name, "_count", s, NULL);
	fprintf(out, " %llu\n", (unsigned long long)total);
}

static void render_family(FILE *out, const struct family *f)
{
	fprintf(out, "# HELP %s ", f->name);
	escaped(out, f->help, false);
	fprintf(out, "\n# TYPE %s %s\n", f->name, type_names[f->type]);
	for (const struct series *s = f->first; s; s = s->next) {
		if (f->type == HISTOGRAM) {
			render_histogram(out, f->name, s);
			continue;
		}
		series_name(out, f->name, "", s, NULL);
		if (f->type == COUNTER)
			fprintf(out, " %llu\n", (unsigned long long)atomic_load_explicit(
			                            &s->u.counter.value, memory_order_relaxed));
		else
			fprintf(out, " %lld\n", (long long)atomic_load_explicit(&s->u.gauge.value,
			                                                        memory_order_relaxed));
	}
}

int kvc_metrics_render(struct kvc_metrics *m, FILE *out)
{
	pthread_mutex_lock(&m->collect_lock);
	for (struct collector *c = m->collectors; c; c = c->next)
		c->collect(c->arg); /* may register series: takes lock */
	pthread_mutex_lock(&m->lock);
	pthread_mutex_unlock(&m->collect_lock);
	for (const struct family *f = m->families; f; f = f->next)
		render_family(out, f);
	pthread_mutex_unlock(&m->lock);
	return ferror(out) ? -EIO : 0;
}

char *kvc_metrics_text(struct kvc_metrics *m, size_t *len)
{
	char *text = NULL;
	size_t size = 0;
	FILE *out = open_memstream(&text, &size);
	if (!out)
		return NULL;
	int rc = kvc_metrics_render(m, out);
	if (fclose(out) != 0 || rc < 0) {
		free(text);
		return NULL;
	}
	*len = size;
	return text;
}
