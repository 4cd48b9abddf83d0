/*
 * notify.h - alerts to an operator's command (`day0 run --notify CMD`).
 */
#ifndef DAY0_NOTIFY_H
#define DAY0_NOTIFY_H

#include <jansson.h>

/* Run `sh -c cmd` detached with the alert (one JSON line) on its stdin. */
void notify_alert(const char *cmd, json_t *alert);

#endif
