"""SUBNET / NETWORK_NAME / OVERLAY_MTU changed while the deployment is up: one line saying what changed and to tear
down first; a same-named network of something else keeps its own message. Fakes of the docker-py objects only."""
import pytest
import yaml

from testbed.cluster import swarm
from testbed.core.config import load_exp_config
from testbed.cluster.hosts import Host

DEPLOYMENT = "edge"
TEAR_DOWN = ("tear it down first with the old exp_config.py values (`make down`, i.e. "
             "`.venv/bin/python start_containers.py --down`), then bring it up with the new ones")


class FakeNet:
    def __init__(self, name, subnet, labels=None, mtu="1450"):
        self.attrs = {"Name": name, "Driver": "overlay", "Labels": labels or {},
                      "IPAM": {"Config": [{"Subnet": subnet, "Gateway": subnet.replace("0.0/", "0.1/")[:-3]}]},
                      "Options": {"com.docker.network.driver.overlay.vxlanid_list": "4097",
                                  **({swarm.MTU_OPTION: mtu} if mtu else {})}}
        self.removed = False

    def remove(self):
        self.removed = True


class FakeNetworks:
    def __init__(self, nets):
        self.nets, self.created = list(nets), []

    def list(self, names=None, filters=None):
        assert filters is None
        return [n for n in self.nets if names is None or n.attrs["Name"] in names]

    def create(self, name, **kw):
        self.created.append((name, kw))
        return FakeNet(name, kw["ipam"]["Config"][0]["Subnet"], kw["labels"])


class FakeClient:
    """Enough of docker.DockerClient for up() to reach the network step on a one-node swarm that exists."""

    def __init__(self, nets):
        self.networks = FakeNetworks(nets)
        self.images = type("Images", (), {"get": lambda _self, name: type("Img", (), {"id": "sha256:abc"})()})()
        self.nodes = type("Nodes", (), {"list": lambda _self: [type("Node", (), {"attrs": {"ID": "n1"}})()]})()
        self.containers = type("Cts", (), {"list": lambda _self, **kw: [], "get": lambda _self, n: None})()
        self.closed = False

    def info(self):
        return {"Swarm": {"LocalNodeState": "active", "ControlAvailable": True, "NodeID": "n1"}, "NCPU": 2}

    def close(self):
        self.closed = True


def ours(subnet="10.55.0.0/16", name="edge_txn", mtu="1450", deployment=DEPLOYMENT):
    return FakeNet(name, subnet, {swarm.LABEL: deployment}, mtu)


def cfg_with(**knobs):
    if "subnet" in knobs:   # the driver moves with the subnet
        knobs.setdefault("driver_ip", knobs["subnet"].replace("0.0/", "0.240/").split("/")[0])
    return load_exp_config({k.upper(): v for k, v in knobs.items()})


def checks(nets, cfg):
    """check_subnet then ensure_network, as up() runs them; -> (the network, the fake networks API)."""
    client = FakeClient(nets)
    swarm.check_subnet({"localhost": client}, cfg, DEPLOYMENT)
    return swarm.ensure_network(client, cfg, DEPLOYMENT), client.networks


@pytest.mark.parametrize("new_subnet", ["10.56.0.0/16", "10.55.0.0/17"], ids=["disjoint", "overlapping"])
def test_subnet_changed_while_up(new_subnet):
    # overlapping: the old network must not be reported as a clash with itself before this message
    with pytest.raises(swarm.SwarmError) as e:
        checks([ours()], cfg_with(subnet=new_subnet))
    assert str(e.value) == (f"SUBNET changed from 10.55.0.0/16 to {new_subnet} while deployment edge is up "
                            f"(its network edge_txn was made with the old value); {TEAR_DOWN}")


def test_network_name_changed_while_up_is_not_a_subnet_clash():
    with pytest.raises(swarm.SwarmError) as e:
        checks([ours()], cfg_with(network_name="edge_txn2"))
    assert str(e.value) == ("NETWORK_NAME changed from 'edge_txn' to 'edge_txn2' while deployment edge is up "
                            f"(its network edge_txn was made with the old value); {TEAR_DOWN}")


@pytest.mark.parametrize("old,new,what", [("1450", 1400, "from 1450 to 1400"), (None, 1450, "from None to 1450"),
                                          ("1450", None, "from 1450 to None")])
def test_overlay_mtu_changed_while_up(old, new, what):
    with pytest.raises(swarm.SwarmError, match=rf"^OVERLAY_MTU changed {what} while deployment edge is up"):
        checks([ours(mtu=old)], cfg_with(overlay_mtu=new))


def test_several_changes_in_one_line():
    with pytest.raises(swarm.SwarmError) as e:
        checks([ours()], cfg_with(subnet="10.56.0.0/16", overlay_mtu=1400))
    assert str(e.value) == ("SUBNET changed from 10.55.0.0/16 to 10.56.0.0/16 and OVERLAY_MTU changed from 1450 to "
                            "1400 while deployment edge is up (its network edge_txn was made with the old values); "
                            f"{TEAR_DOWN}")
    assert "\n" not in str(e.value)


def test_unchanged_network_is_reused():
    net = ours()
    got, api = checks([FakeNet("bridge", "172.17.0.0/16"), net], cfg_with())
    assert got is net and api.created == []


def test_no_network_is_created_with_label_subnet_and_mtu():
    got, api = checks([FakeNet("bridge", "172.17.0.0/16")], cfg_with(overlay_mtu=1400))
    [(name, kw)] = api.created
    assert name == "edge_txn" and kw["labels"] == {swarm.LABEL: DEPLOYMENT} and kw["attachable"]
    assert kw["options"] == {swarm.MTU_OPTION: "1400"} and kw["ipam"]["Config"][0]["Subnet"] == "10.55.0.0/16"


@pytest.mark.parametrize("labels", [{}, {swarm.LABEL: "other-deployment"}], ids=["unlabelled", "other-deployment"])
def test_same_name_network_of_something_else_keeps_its_message(labels):
    with pytest.raises(swarm.SwarmError) as e:
        checks([FakeNet("edge_txn", "10.55.0.0/16", labels)], cfg_with())
    assert str(e.value) == ("NETWORK_NAME='edge_txn' exists already (subnets ['10.55.0.0/16']) and was not made by "
                            "this deployment; remove it or choose another NETWORK_NAME")


def test_other_networks_still_clash():
    for net in (FakeNet("someone_else", "10.55.3.0/24"), ours(name="x", deployment="other-deployment")):
        with pytest.raises(swarm.SwarmError, match=rf"^SUBNET=10.55.0.0/16 clashes with Docker network "
                                                   rf"'{net.attrs['Name']}' \(10.55"):
            checks([net], cfg_with())


def test_up_with_a_changed_subnet_says_so_and_touches_nothing(monkeypatch, tmp_path):
    """Through up(), with the deployment up (containers.yml there): the message, and nothing created or removed."""
    net = ours()
    client = FakeClient([net])
    monkeypatch.setattr(swarm, "connect", lambda hosts, **kw: {"localhost": client})
    yml = tmp_path / "containers.yml"
    yml.write_text(yaml.safe_dump({"deployment": DEPLOYMENT, "network": "edge_txn", "containers": []}))
    with pytest.raises(swarm.SwarmError, match=r"^SUBNET changed from 10.55.0.0/16 to 10.56.0.0/16 while "
                                               r"deployment edge is up"):
        swarm.up(cfg_with(subnet="10.56.0.0/16"), [Host("localhost")], containers_yml=yml,
                 state_dir=tmp_path / "state", log=lambda m: None)
    assert client.networks.created == [] and not net.removed and client.closed
    assert not (tmp_path / "state").exists()
