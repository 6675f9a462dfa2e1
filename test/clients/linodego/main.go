// Command fulcrum-linodego drives a Fulcrum lab with the real linodego, the Go client the Terraform
// provider is built on, so linodego's own request encoding, decoding, filters and event waiters
// run against our answers. test/e2e/linodego.test.ts builds it and runs it against a fresh lab.
//
// It reads the lab's `export LINODE_URL=... LINODE_API_VERSION=v4 LINODE_TOKEN=...` line from its
// environment, as a user's program would, and the backends the test started from its flags. Each
// step prints one JSON line {"step": ..., ...}; the first thing that differs from what linodego
// should see ends the run with exit status 1 and the reason on stderr.
//
// The database steps follow the linode_database_mysql_v2 resource of the Terraform provider
// (an event poller made before the create, its entity set from the answer, then WaitForFinished
// and WaitForDatabaseStatus; an update poller around a PUT), since the provider itself cannot be
// built here (docs/compatibility.md).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/linode/linodego"
)

var (
	httpBackends = flag.String("http-backends", "", "two ip:port HTTP backends, comma separated")
	udpBackend   = flag.String("udp-backend", "", "one ip:port UDP echo backend")
	prefix       = flag.String("label-prefix", "lgo", "prefix of every label this run makes")
	region       = flag.String("region", "us-east", "region to create in")
)

// The waits are generous: CI shares 2 cores between many tests (docs/testing.md).
const (
	eventTimeout    = 600
	databaseTimeout = 600
)

func main() {
	flag.Parse()
	if err := run(context.Background()); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: %v\n", err)
		os.Exit(1)
	}
}

func report(step string, fields map[string]any) {
	if fields == nil {
		fields = map[string]any{}
	}
	fields["step"] = step
	b, _ := json.Marshal(fields)
	fmt.Println(string(b))
}

func check(ok bool, format string, args ...any) error {
	if ok {
		return nil
	}
	return fmt.Errorf(format, args...)
}

func filter(fields map[string]any) string {
	f := linodego.Filter{}
	for k, v := range fields {
		f.AddField(linodego.Eq, k, v)
	}
	b, err := f.MarshalJSON()
	if err != nil {
		panic(err)
	}
	return string(b)
}

// poll calls fn every 500 ms until it returns true or an error, or fails after limit.
func poll(ctx context.Context, what string, limit time.Duration, fn func() (bool, error)) error {
	deadline := time.Now().Add(limit)
	var last error
	for {
		ok, err := fn()
		if err == nil && ok {
			return nil
		}
		if err != nil {
			last = err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out waiting for %s (last error: %v)", what, last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func run(ctx context.Context) error {
	backends := strings.Split(*httpBackends, ",")
	if len(backends) != 2 || *udpBackend == "" {
		return errors.New("need -http-backends a,b and -udp-backend")
	}
	// NewClientFromEnv reads LINODE_URL, LINODE_API_VERSION and LINODE_TOKEN as the provider does.
	client, err := linodego.NewClientFromEnv(nil)
	if err != nil {
		return fmt.Errorf("linodego.NewClientFromEnv: %w", err)
	}
	// The default 3 s between polls would make every wait slow; the logic stays linodego's.
	client.SetPollDelay(500 * time.Millisecond)

	nbID, err := nodeBalancerSteps(ctx, client, backends)
	if err != nil {
		return err
	}
	if err := databaseSteps(ctx, client); err != nil {
		return err
	}

	// Delete the NodeBalancer last, waiting for its event; its configs and nodes go with it.
	poller, err := client.NewEventPoller(ctx, nbID, linodego.EntityNodebalancer, linodego.ActionNodebalancerDelete)
	if err != nil {
		return fmt.Errorf("NewEventPoller nodebalancer_delete: %w", err)
	}
	if err := client.DeleteNodeBalancer(ctx, nbID); err != nil {
		return fmt.Errorf("DeleteNodeBalancer: %w", err)
	}
	if err := waitForEvent(ctx, poller, nbID); err != nil {
		return err
	}
	_, err = client.GetNodeBalancer(ctx, nbID)
	if err := check(linodego.IsNotFound(err), "GetNodeBalancer after delete: want a 404, got %v", err); err != nil {
		return err
	}
	left, err := client.ListNodeBalancers(ctx, linodego.NewListOptions(0, filter(map[string]any{"label": *prefix + "-nb2"})))
	if err != nil {
		return fmt.Errorf("ListNodeBalancers after delete: %w", err)
	}
	if err := check(len(left) == 0, "ListNodeBalancers after delete still lists %d", len(left)); err != nil {
		return err
	}
	report("nodebalancer deleted", map[string]any{"id": nbID})
	return nil
}

// waitForEvent waits, with linodego's poller, for the next event it has not seen and checks
// that it names the entity. NodeBalancer events are notifications (never "finished"), so this
// waits for the event itself, not for a status.
func waitForEvent(ctx context.Context, p *linodego.EventPoller, id int) error {
	ctx, cancel := context.WithTimeout(ctx, eventTimeout*time.Second)
	defer cancel()
	e, err := p.WaitForLatestUnknownEvent(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", p.Action, err)
	}
	if err := check(e.Action == p.Action && e.Entity != nil && e.Entity.Type == p.EntityType, "event %d is %s on %+v", e.ID, e.Action, e.Entity); err != nil {
		return err
	}
	if err := check(fmt.Sprint(e.Entity.ID) == fmt.Sprint(id), "event %d is about entity %v, not %d", e.ID, e.Entity.ID, id); err != nil {
		return err
	}
	if err := check(e.Created != nil && time.Since(*e.Created) < time.Hour && time.Since(*e.Created) > -time.Hour, "event %d created %v", e.ID, e.Created); err != nil {
		return err
	}
	report("event", map[string]any{"action": string(e.Action), "entity": id, "status": string(e.Status)})
	return nil
}

func nodeBalancerSteps(ctx context.Context, client *linodego.Client, backends []string) (int, error) {
	label := *prefix + "-nb"
	throttle := 5
	poller, err := client.NewEventPollerWithoutEntity(linodego.EntityNodebalancer, linodego.ActionNodebalancerCreate)
	if err != nil {
		return 0, err
	}
	nb, err := client.CreateNodeBalancer(ctx, linodego.NodeBalancerCreateOptions{
		Label: &label, Region: *region, ClientConnThrottle: &throttle, Tags: []string{"linodego"},
	})
	if err != nil {
		return 0, fmt.Errorf("CreateNodeBalancer: %w", err)
	}
	poller.EntityID = nb.ID
	if err := waitForEvent(ctx, poller, nb.ID); err != nil {
		return 0, err
	}
	if err := check(nb.Label != nil && *nb.Label == label && nb.Region == *region && nb.ClientConnThrottle == throttle &&
		nb.IPv4 != nil && net.ParseIP(*nb.IPv4) != nil && nb.Hostname != nil && *nb.Hostname != "" &&
		slices.Equal(nb.Tags, []string{"linodego"}) && nb.Created != nil && nb.Updated != nil, "CreateNodeBalancer decoded %+v", nb); err != nil {
		return 0, err
	}
	report("nodebalancer created", map[string]any{"id": nb.ID, "ipv4": *nb.IPv4, "created": nb.Created})

	// An HTTP config with an HTTP check, and two nodes.
	cfg, err := client.CreateNodeBalancerConfig(ctx, nb.ID, linodego.NodeBalancerConfigCreateOptions{
		Port: 80, Protocol: linodego.ProtocolHTTP, Algorithm: linodego.AlgorithmRoundRobin,
		Check: linodego.CheckHTTP, CheckPath: "/", CheckInterval: 2, CheckTimeout: 1, CheckAttempts: 2,
	})
	if err != nil {
		return 0, fmt.Errorf("CreateNodeBalancerConfig http: %w", err)
	}
	if err := check(cfg.Port == 80 && cfg.Protocol == linodego.ProtocolHTTP && cfg.Check == linodego.CheckHTTP && cfg.CheckPath == "/" &&
		cfg.NodeBalancerID == nb.ID && cfg.NodesStatus != nil, "CreateNodeBalancerConfig decoded %+v", cfg); err != nil {
		return 0, err
	}
	nodes := make([]*linodego.NodeBalancerNode, 2)
	for i, addr := range backends {
		nodes[i], err = client.CreateNodeBalancerNode(ctx, nb.ID, cfg.ID, linodego.NodeBalancerNodeCreateOptions{
			Address: addr, Label: fmt.Sprintf("web-%d", i+1), Weight: 50, Mode: linodego.ModeAccept,
		})
		if err != nil {
			return 0, fmt.Errorf("CreateNodeBalancerNode %s: %w", addr, err)
		}
		if err := check(nodes[i].Address == addr && nodes[i].Weight == 50 && nodes[i].Mode == linodego.ModeAccept &&
			nodes[i].ConfigID == cfg.ID && nodes[i].NodeBalancerID == nb.ID, "CreateNodeBalancerNode decoded %+v", nodes[i]); err != nil {
			return 0, err
		}
	}
	report("http config and nodes created", map[string]any{"config": cfg.ID, "nodes": []int{nodes[0].ID, nodes[1].ID}})

	if err := poll(ctx, "both nodes UP", 180*time.Second, func() (bool, error) {
		list, err := client.ListNodeBalancerNodes(ctx, nb.ID, cfg.ID, nil)
		if err != nil {
			return false, err
		}
		return len(list) == 2 && list[0].Status == "UP" && list[1].Status == "UP", nil
	}); err != nil {
		return 0, err
	}
	got, err := client.GetNodeBalancerConfig(ctx, nb.ID, cfg.ID)
	if err != nil {
		return 0, err
	}
	if err := check(got.NodesStatus != nil && got.NodesStatus.Up == 2 && got.NodesStatus.Down == 0, "nodes_status %+v", got.NodesStatus); err != nil {
		return 0, err
	}
	// Round robin through the NodeBalancer's address: one answer from each backend.
	seen := map[string]bool{}
	for range 2 {
		body, err := httpGet(fmt.Sprintf("http://%s:80/", *nb.IPv4))
		if err != nil {
			return 0, err
		}
		seen[body] = true
	}
	if err := check(len(seen) == 2, "two requests through the NodeBalancer got %v", seen); err != nil {
		return 0, err
	}
	report("http traffic", map[string]any{"answers": len(seen)})

	// A UDP config with a node; the answer carries the UDP keys linodego decodes.
	udpCfg, err := client.CreateNodeBalancerConfig(ctx, nb.ID, linodego.NodeBalancerConfigCreateOptions{
		Port: 5353, Protocol: linodego.ProtocolUDP, Algorithm: linodego.AlgorithmRoundRobin, Check: linodego.CheckNone,
	})
	if err != nil {
		return 0, fmt.Errorf("CreateNodeBalancerConfig udp: %w", err)
	}
	if err := check(udpCfg.Protocol == linodego.ProtocolUDP && udpCfg.Port == 5353 && udpCfg.UDPCheckPort > 0 && udpCfg.UDPSessionTimeout > 0,
		"CreateNodeBalancerConfig udp decoded %+v", udpCfg); err != nil {
		return 0, err
	}
	udpNode, err := client.CreateNodeBalancerNode(ctx, nb.ID, udpCfg.ID, linodego.NodeBalancerNodeCreateOptions{Address: *udpBackend, Label: "udp-1"})
	if err != nil {
		return 0, fmt.Errorf("CreateNodeBalancerNode udp: %w", err)
	}
	answer, err := udpExchange(ctx, fmt.Sprintf("%s:5353", *nb.IPv4), "ping")
	if err != nil {
		return 0, err
	}
	if err := check(strings.HasSuffix(answer, ":ping"), "UDP answer %q", answer); err != nil {
		return 0, err
	}
	report("udp config and traffic", map[string]any{"config": udpCfg.ID, "node": udpNode.ID, "udp_check_port": udpCfg.UDPCheckPort,
		"udp_session_timeout": udpCfg.UDPSessionTimeout, "answer": answer})

	// Updates: each PUT's answer is decoded and a later GET agrees with it.
	newLabel := *prefix + "-nb2"
	upd, err := client.UpdateNodeBalancer(ctx, nb.ID, linodego.NodeBalancerUpdateOptions{Label: &newLabel})
	if err != nil {
		return 0, fmt.Errorf("UpdateNodeBalancer: %w", err)
	}
	if err := check(upd.Label != nil && *upd.Label == newLabel && upd.ClientConnThrottle == throttle, "UpdateNodeBalancer decoded %+v", upd); err != nil {
		return 0, err
	}
	cfgUpd := got.GetUpdateOptions()
	cfgUpd.CheckInterval = 3
	updCfg, err := client.UpdateNodeBalancerConfig(ctx, nb.ID, cfg.ID, linodego.NodeBalancerConfigUpdateOptions(cfgUpd))
	if err != nil {
		return 0, fmt.Errorf("UpdateNodeBalancerConfig (linodego's GetUpdateOptions of our answer): %w", err)
	}
	if err := check(updCfg.CheckInterval == 3 && updCfg.CheckPath == "/" && updCfg.Port == 80, "UpdateNodeBalancerConfig decoded %+v", updCfg); err != nil {
		return 0, err
	}
	nodePoller, err := client.NewEventPoller(ctx, nb.ID, linodego.EntityNodebalancer, linodego.ActionNodebalancerNodeUpdate)
	if err != nil {
		return 0, err
	}
	nodeUpd := nodes[0].GetUpdateOptions()
	nodeUpd.Weight = 10
	updNode, err := client.UpdateNodeBalancerNode(ctx, nb.ID, cfg.ID, nodes[0].ID, nodeUpd)
	if err != nil {
		return 0, fmt.Errorf("UpdateNodeBalancerNode: %w", err)
	}
	if err := check(updNode.Weight == 10 && updNode.Address == backends[0] && updNode.Label == "web-1", "UpdateNodeBalancerNode decoded %+v", updNode); err != nil {
		return 0, err
	}
	if err := waitForEvent(ctx, nodePoller, nb.ID); err != nil {
		return 0, err
	}
	again, err := client.GetNodeBalancerNode(ctx, nb.ID, cfg.ID, nodes[0].ID)
	if err != nil {
		return 0, err
	}
	if err := check(again.Weight == 10, "GetNodeBalancerNode after update: weight %d", again.Weight); err != nil {
		return 0, err
	}
	report("nodebalancer updated", map[string]any{"label": newLabel, "check_interval": 3, "weight": 10})

	// Lists with filters, as linodego writes them into X-Filter.
	byLabel, err := client.ListNodeBalancers(ctx, linodego.NewListOptions(0, filter(map[string]any{"label": newLabel})))
	if err != nil {
		return 0, fmt.Errorf("ListNodeBalancers with a filter: %w", err)
	}
	if err := check(len(byLabel) == 1 && byLabel[0].ID == nb.ID, "ListNodeBalancers label=%s gave %d", newLabel, len(byLabel)); err != nil {
		return 0, err
	}
	none, err := client.ListNodeBalancers(ctx, linodego.NewListOptions(0, filter(map[string]any{"label": label})))
	if err != nil {
		return 0, err
	}
	if err := check(len(none) == 0, "ListNodeBalancers by the old label gave %d", len(none)); err != nil {
		return 0, err
	}
	// Filters with an operator and an order (Configs and Nodes have no filterable fields in the
	// spec, so their lists take none: docs/compatibility.md, "Pagination and X-Filter").
	ordered := linodego.Filter{OrderBy: "label", Order: linodego.Descending}
	ordered.AddField(linodego.Contains, "label", *prefix+"-")
	ordered.AddField(linodego.Eq, "region", *region)
	ob, _ := ordered.MarshalJSON()
	contains, err := client.ListNodeBalancers(ctx, linodego.NewListOptions(0, string(ob)))
	if err != nil {
		return 0, fmt.Errorf("ListNodeBalancers with +contains and +order_by: %w", err)
	}
	if err := check(len(contains) == 1 && contains[0].ID == nb.ID, "ListNodeBalancers %s gave %d", ob, len(contains)); err != nil {
		return 0, err
	}
	cfgs, err := client.ListNodeBalancerConfigs(ctx, nb.ID, nil)
	if err != nil {
		return 0, fmt.Errorf("ListNodeBalancerConfigs: %w", err)
	}
	if err := check(len(cfgs) == 2 && cfgs[0].ID == cfg.ID && cfgs[1].ID == udpCfg.ID, "ListNodeBalancerConfigs gave %+v", cfgs); err != nil {
		return 0, err
	}
	report("lists with filters", map[string]any{"nodebalancers": len(byLabel), "configs": len(cfgs)})

	// A node and a config deleted one by one.
	if err := client.DeleteNodeBalancerNode(ctx, nb.ID, udpCfg.ID, udpNode.ID); err != nil {
		return 0, fmt.Errorf("DeleteNodeBalancerNode: %w", err)
	}
	if err := client.DeleteNodeBalancerConfig(ctx, nb.ID, udpCfg.ID); err != nil {
		return 0, fmt.Errorf("DeleteNodeBalancerConfig: %w", err)
	}
	rest, err := client.ListNodeBalancerConfigs(ctx, nb.ID, nil)
	if err != nil {
		return 0, err
	}
	if err := check(len(rest) == 1 && rest[0].ID == cfg.ID, "configs after deleting the UDP one: %d", len(rest)); err != nil {
		return 0, err
	}
	report("udp config deleted", nil)
	return nb.ID, nil
}

func httpGet(url string) (string, error) {
	c := http.Client{Timeout: 10 * time.Second}
	res, err := c.Get(url)
	if err != nil {
		return "", fmt.Errorf("GET %s: %w", url, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != 200 {
		return "", fmt.Errorf("GET %s: %d %v", url, res.StatusCode, err)
	}
	return string(b), nil
}

// udpExchange sends a datagram and waits for the answer, sending again every second (the data
// plane may not have applied the config yet).
func udpExchange(ctx context.Context, addr, msg string) (string, error) {
	conn, err := net.Dial("udp4", addr)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	var answer string
	err = poll(ctx, "a UDP answer from "+addr, 60*time.Second, func() (bool, error) {
		if _, err := conn.Write([]byte(msg)); err != nil {
			return false, err
		}
		_ = conn.SetReadDeadline(time.Now().Add(time.Second))
		buf := make([]byte, 1500)
		n, err := conn.Read(buf)
		if err != nil {
			return false, err
		}
		answer = string(buf[:n])
		return true, nil
	})
	return answer, err
}

// createDatabase is the provider's create: a poller without an entity before the POST, its
// entity set from the answer, the create event waited for, then the status.
func createDatabase(ctx context.Context, client *linodego.Client, opts linodego.MySQLCreateOptions) (*linodego.MySQLDatabase, error) {
	poller, err := client.NewEventPollerWithoutEntity(linodego.EntityDatabase, linodego.ActionDatabaseCreate)
	if err != nil {
		return nil, err
	}
	db, err := client.CreateMySQLDatabase(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("CreateMySQLDatabase %s: %w", opts.Label, err)
	}
	poller.EntityID = db.ID
	ev, err := poller.WaitForFinished(ctx, databaseTimeout)
	if err != nil {
		return nil, fmt.Errorf("database_create of %d: %w", db.ID, err)
	}
	report("event", map[string]any{"action": string(ev.Action), "entity": db.ID, "status": string(ev.Status)})
	if err := client.WaitForDatabaseStatus(ctx, db.ID, linodego.DatabaseEngineTypeMySQL, linodego.DatabaseStatusActive, databaseTimeout); err != nil {
		return nil, err
	}
	return client.GetMySQLDatabase(ctx, db.ID)
}

// reachable reads the server's greeting on the database's endpoint: a MySQL protocol 10 handshake.
func reachable(host string, port int) error {
	conn, err := net.DialTimeout("tcp", net.JoinHostPort(host, fmt.Sprint(port)), 10*time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	head := make([]byte, 5)
	if _, err := io.ReadFull(conn, head); err != nil {
		return fmt.Errorf("no greeting from %s:%d: %w", host, port, err)
	}
	return check(head[4] == 10, "greeting from %s:%d has protocol %d", host, port, head[4])
}

func databaseSteps(ctx context.Context, client *linodego.Client) error {
	engines, err := client.ListDatabaseEngines(ctx, linodego.NewListOptions(0, filter(map[string]any{"engine": "mysql"})))
	if err != nil {
		return fmt.Errorf("ListDatabaseEngines: %w", err)
	}
	if err := check(len(engines) > 0 && engines[0].Engine == "mysql", "ListDatabaseEngines engine=mysql gave %+v", engines); err != nil {
		return err
	}
	engine := engines[0].ID
	label := *prefix + "-db"
	db, err := createDatabase(ctx, client, linodego.MySQLCreateOptions{
		Label: label, Region: *region, Type: "g6-nanode-1", Engine: engine, AllowList: []string{"127.0.0.0/8"}, ClusterSize: 1,
	})
	if err != nil {
		return err
	}
	if err := check(db.Status == linodego.DatabaseStatusActive && db.Label == label && db.Engine == "mysql" && db.ClusterSize == 1 &&
		db.Hosts.Primary != "" && db.Port > 0 && slices.Equal(db.AllowList, []string{"127.0.0.0/8"}) && db.Created != nil &&
		db.Updates.DayOfWeek >= 1 && db.Platform != "" && db.Fork == nil, "GetMySQLDatabase decoded %+v", db); err != nil {
		return err
	}
	if err := reachable(db.Hosts.Primary, db.Port); err != nil {
		return err
	}
	creds, err := client.GetMySQLDatabaseCredentials(ctx, db.ID)
	if err != nil {
		return fmt.Errorf("GetMySQLDatabaseCredentials: %w", err)
	}
	ssl, err := client.GetMySQLDatabaseSSL(ctx, db.ID)
	if err != nil {
		return fmt.Errorf("GetMySQLDatabaseSSL: %w", err)
	}
	if err := check(creds.Username != "" && len(creds.Password) >= 8 && strings.Contains(string(ssl.CACertificate), "BEGIN CERTIFICATE"),
		"credentials %q, CA %d bytes", creds.Username, len(ssl.CACertificate)); err != nil {
		return err
	}
	report("database active", map[string]any{"id": db.ID, "host": db.Hosts.Primary, "port": db.Port, "version": db.Version})

	// Lists with filters.
	byLabel, err := client.ListMySQLDatabases(ctx, linodego.NewListOptions(0, filter(map[string]any{"label": label})))
	if err != nil {
		return fmt.Errorf("ListMySQLDatabases with a filter: %w", err)
	}
	all, err := client.ListDatabases(ctx, linodego.NewListOptions(0, filter(map[string]any{"engine": "mysql", "label": label})))
	if err != nil {
		return fmt.Errorf("ListDatabases with a filter: %w", err)
	}
	if err := check(len(byLabel) == 1 && byLabel[0].ID == db.ID && len(all) == 1 && all[0].ID == db.ID, "filtered lists gave %d and %d", len(byLabel), len(all)); err != nil {
		return err
	}

	// The allow list changed in place, as the provider does it: an update poller around the PUT.
	updPoller, err := client.NewEventPoller(ctx, db.ID, linodego.EntityDatabase, linodego.ActionDatabaseUpdate)
	if err != nil {
		return err
	}
	allow := []string{"127.0.0.0/8", "10.0.0.0/8"}
	if _, err := client.UpdateMySQLDatabase(ctx, db.ID, linodego.MySQLUpdateOptions{AllowList: &allow}); err != nil {
		return fmt.Errorf("UpdateMySQLDatabase: %w", err)
	}
	if _, err := updPoller.WaitForFinished(ctx, databaseTimeout); err != nil {
		return fmt.Errorf("database_update: %w", err)
	}
	if err := client.WaitForDatabaseStatus(ctx, db.ID, linodego.DatabaseEngineTypeMySQL, linodego.DatabaseStatusActive, databaseTimeout); err != nil {
		return err
	}
	db, err = client.GetMySQLDatabase(ctx, db.ID)
	if err != nil {
		return err
	}
	if err := check(slices.Equal(db.AllowList, allow), "allow_list after the update: %v", db.AllowList); err != nil {
		return err
	}
	report("database updated", map[string]any{"allow_list": db.AllowList})

	// A fork to a second after the source's oldest restore time, with linodego's own encoding of
	// the restore time.
	if err := poll(ctx, "oldest_restore_time", 300*time.Second, func() (bool, error) {
		db, err = client.GetMySQLDatabase(ctx, db.ID)
		return err == nil && db.OldestRestoreTime != nil, err
	}); err != nil {
		return err
	}
	// The next whole second after the oldest restore time, and after the second the call is made in.
	at := db.OldestRestoreTime.Truncate(time.Second).Add(time.Second)
	if err := poll(ctx, "the restore time to be past", 60*time.Second, func() (bool, error) { return time.Now().After(at.Add(time.Second)), nil }); err != nil {
		return err
	}
	fork, err := createDatabase(ctx, client, linodego.MySQLCreateOptions{
		Label: *prefix + "-fork", Region: *region, Type: "g6-nanode-1", Engine: engine, AllowList: []string{"127.0.0.0/8"}, ClusterSize: 1,
		Fork: &linodego.DatabaseFork{Source: db.ID, RestoreTime: &at},
	})
	if err != nil {
		return err
	}
	if err := check(fork.Fork != nil && fork.Fork.Source == db.ID && fork.Fork.RestoreTime != nil && fork.Fork.RestoreTime.Equal(at),
		"the fork's fork decoded %+v (want source %d at %v)", fork.Fork, db.ID, at); err != nil {
		return err
	}
	if err := reachable(fork.Hosts.Primary, fork.Port); err != nil {
		return err
	}
	report("fork active", map[string]any{"id": fork.ID, "source": fork.Fork.Source, "restore_time": fork.Fork.RestoreTime.UTC().Format(time.RFC3339)})

	// Both deleted, each waited for with WaitForEventFinished as the provider's v1 resource does.
	for _, id := range []int{fork.ID, db.ID} {
		since := time.Now().Add(-2 * time.Second)
		if err := client.DeleteMySQLDatabase(ctx, id); err != nil {
			return fmt.Errorf("DeleteMySQLDatabase %d: %w", id, err)
		}
		if _, err := client.WaitForEventFinished(ctx, id, linodego.EntityDatabase, linodego.ActionDatabaseDelete, since, databaseTimeout); err != nil {
			return err
		}
		if err := poll(ctx, fmt.Sprintf("database %d gone", id), 300*time.Second, func() (bool, error) {
			_, err := client.GetMySQLDatabase(ctx, id)
			return linodego.IsNotFound(err), nil
		}); err != nil {
			return err
		}
	}
	left, err := client.ListMySQLDatabases(ctx, nil)
	if err != nil {
		return err
	}
	for _, d := range left {
		if err := check(d.ID != db.ID && d.ID != fork.ID, "database %d still listed", d.ID); err != nil {
			return err
		}
	}
	report("databases deleted", map[string]any{"ids": []int{db.ID, fork.ID}})
	return nil
}
