/*
 * A SPANK plugin for the test cluster (tests/support/slurm_cluster.py builds it with gcc at start and loads it
 * through its own plugstack.conf): sbatch and srun get the option --cddp-tag=VALUE, listed in their --help as a
 * site's plugin options are (pyxis's --container-image, say), and each task of the job gets CDDP_TAG=VALUE in
 * its environment. It lets the tests show that an sbatch option cloudddp's table does not know is accepted where
 * the cluster's own sbatch offers it. spank.h is Debian's libslurm-dev.
 */
#include <stdio.h>
#include <string.h>
#include <slurm/spank.h>

SPANK_PLUGIN(cddp_tag, 1);

static char tag[256];

static int take_tag(int val, const char *optarg, int remote)
{
	(void)val;
	(void)remote;
	if (optarg == NULL || strlen(optarg) >= sizeof(tag))
		return -1;
	strcpy(tag, optarg);
	return 0;
}

static struct spank_option option = {
	"cddp-tag", "VALUE", "cloudddp's test plugin: the job's tasks get CDDP_TAG=VALUE", 1, 0, take_tag,
};

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	return spank_option_register(sp, &option) == ESPANK_SUCCESS ? 0 : -1;
}

int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	if (tag[0] == '\0')
		return 0;
	return spank_setenv(sp, "CDDP_TAG", tag, 1) == ESPANK_SUCCESS ? 0 : -1;
}
