/** The stored shape of an account event (domain side; event-service.ts has the wire shape). */
export interface EventRecord {
  id: number;
  created: number;
  action: string;
  username: string | null;
  entity: { id: number; type: string; label: string; url: string } | null;
  secondaryEntity: { id: number; type: string; label: string; url: string } | null;
  status: 'failed' | 'finished' | 'notification' | 'scheduled' | 'started';
  percentComplete: number | null;
  duration: number | null;
  message: string | null;
  /**
   * The agent hosts the event is about (a host lost, drained, moved to or from), for the console's
   * Fleet page (GET /v4/fulcrum/agents); absent when none. Not part of the public event.
   */
  hosts?: string[];
  seen: boolean;
  read: boolean;
}
