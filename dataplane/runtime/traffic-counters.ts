/**
 * The traffic counters of one config, by name. Listeners and sessions bump them on the hot path
 * through these small methods (plain number fields, no allocation); telemetry takes the deltas
 * every report and /metrics reads the totals at scrape time (telemetry/metrics.ts).
 */
export class TrafficCounters {
  /** Client to backend bytes since the last telemetry report. */
  deltaIn = 0;
  /** Backend (or our own answers) to client bytes since the last report. */
  deltaOut = 0;
  /** Client connections accepted since the last report. */
  deltaConns = 0;
  totalIn = 0;
  totalOut = 0;
  totalConns = 0;
  /** Client connections open now. */
  open = 0;
  /** Responses sent to clients (http, https) by status class, our own answers included. */
  status1xx = 0;
  status2xx = 0;
  status3xx = 0;
  status4xx = 0;
  status5xx = 0;

  /** Bytes read from a client. */
  received(bytes: number): void {
    this.deltaIn += bytes;
    this.totalIn += bytes;
  }

  /** Bytes written to a client. */
  sent(bytes: number): void {
    this.deltaOut += bytes;
    this.totalOut += bytes;
  }

  connectionOpened(): void {
    this.open++;
    this.deltaConns++;
    this.totalConns++;
  }

  connectionClosed(): void {
    this.open--;
  }

  /** A response with this status went to a client; statuses outside 100-599 are not counted. */
  response(status: number): void {
    switch ((status / 100) | 0) {
      case 1: this.status1xx++; break;
      case 2: this.status2xx++; break;
      case 3: this.status3xx++; break;
      case 4: this.status4xx++; break;
      case 5: this.status5xx++; break;
    }
  }

  get hasDelta(): boolean {
    return this.deltaIn !== 0 || this.deltaOut !== 0 || this.deltaConns !== 0;
  }

  resetDelta(): void {
    this.deltaIn = this.deltaOut = this.deltaConns = 0;
  }
}
